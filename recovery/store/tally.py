"""What the metrics exporter reads of the step event log: the rows after a position (and
the ids it still waits for), in id order, each with the tool and submission time of its
step and, for an event that leaves ``verifying``, when that verification round began.

One indexed range read per poll (the primary key, plus the ``(operation_ref, id)`` index
for the start of a verification round): nothing here touches the worker's transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple, TypeVar

from sqlalchemy import Connection, Select, and_, bindparam, case, func, or_, select

from toolsafe.recovery.db import with_db_retry
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.steps import StepStore

T = TypeVar("T")

IDS_PER_QUERY: Final = 500
"""Awaited ids asked for by name in one query (the rest wait for the next poll)."""


class EventRow(NamedTuple):
    """One event as the exporter folds it (only the fields its metrics read)."""

    id: int
    at: datetime
    kind: str
    from_state: StepState | None
    to_state: StepState | None
    reason: str | None
    claim: str | None
    commit_state: str | None
    tool: str | None  # None for an event about a step that does not exist
    submitted_at: datetime | None
    unknown_since: datetime | None  # set when the event leaves verifying


_VERIFYING: Final = StepState.VERIFYING.value
_entry = step_events.alias("entry")
_unknown_since = (
    select(func.max(_entry.c.at))
    .where(
        _entry.c.operation_ref == step_events.c.operation_ref,
        _entry.c.id < step_events.c.id,
        _entry.c.to_state == _VERIFYING,
        or_(_entry.c.from_state.is_(None), _entry.c.from_state != _VERIFYING),
    )
    .scalar_subquery()
)
_COLUMNS: Final = (
    step_events.c.id,
    step_events.c.at,
    step_events.c.kind,
    step_events.c.from_state,
    step_events.c.to_state,
    step_events.c.detail["reason"].as_string(),
    step_events.c.detail["claim"].as_string(),
    step_events.c.detail[("envelope", "commit_state")].as_string(),
    steps.c.tool,
    steps.c.created_at,
    case(
        (
            and_(step_events.c.from_state == _VERIFYING, step_events.c.to_state != _VERIFYING),
            _unknown_since,
        ),
        else_=None,
    ),
)


def _query(awaited: bool) -> Select[Any]:
    after = step_events.c.id > bindparam("after")
    where = or_(after, step_events.c.id.in_(bindparam("ids", expanding=True))) if awaited else after
    return (
        select(*_COLUMNS)
        .select_from(step_events.outerjoin(steps, steps.c.id == step_events.c.step_id))
        .where(where)
        .order_by(step_events.c.id)
        .limit(bindparam("limit"))
    )


_AFTER: Final = _query(False)
_AFTER_OR_AWAITED: Final = _query(True)
_LAST_ID: Final = select(func.max(step_events.c.id))


_STATES: Final[dict[str | None, StepState | None]] = {
    None: None,
    **{state.value: state for state in StepState},
}


def _rows(conn: Connection, query: Select[Any], params: dict[str, Any]) -> list[EventRow]:
    states = _STATES
    return [
        EventRow(id_, at, kind, states[src], states[dst], *rest)
        for id_, at, kind, src, dst, *rest in conn.execute(query, params).all()
    ]


def _read(store: StepStore, work: Callable[[Connection], T]) -> T:
    def attempt() -> T:
        with store.engine.connect() as conn, conn.begin():
            return work(conn)

    return with_db_retry(attempt)


def events_after(
    store: StepStore, after: int, awaited: Sequence[int] = (), limit: int = 10_000
) -> list[EventRow]:
    """Committed events with an id above ``after`` or among ``awaited`` (at most
    ``IDS_PER_QUERY`` of them are asked for), id order, at most ``limit``."""
    ids = list(awaited[:IDS_PER_QUERY])
    params: dict[str, Any] = {"after": after, "limit": limit}
    if ids:
        params["ids"] = ids
    query = _AFTER_OR_AWAITED if ids else _AFTER
    return _read(store, lambda conn: _rows(conn, query, params))


def last_event_id(store: StepStore) -> int:
    """The highest event id committed (0 for an empty log)."""
    return int(_read(store, lambda conn: conn.execute(_LAST_ID).scalar()) or 0)
