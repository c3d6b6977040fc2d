"""What the metrics exporter reads of the SQL store's event log: the rows after a position (and
the ids it still waits for), in id order, each with the tool and submission time of its
step and, for an event that leaves ``verifying``, when that verification round began.

One indexed range read per poll (the primary key, plus the ``(operation_ref, id)`` index
for the start of a verification round): nothing here touches the worker's transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from sqlalchemy import Connection, Select, and_, bindparam, case, func, or_, select, text, true

from toolsafe.recovery.db import with_db_retry
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql.steps import StepStore
from toolsafe.recovery.store.tally import IDS_PER_QUERY, EventGroup, EventRow

__all__ = ["SqlTally", "events_after", "history", "last_event_id", "settled_position"]

T = TypeVar("T")

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


def _read(store: StepStore, work: Callable[[Connection], T], *, scan: bool = False) -> T:
    def attempt() -> T:
        with store.engine.connect() as conn, conn.begin():
            if scan and conn.dialect.name == "postgresql":
                # A whole-table pass looks expensive to the planner, which would spend
                # longer compiling it (JIT) than running it.
                conn.execute(text("SET LOCAL jit = off"))
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


# ------------------------------------------------------------------ the history at once


def _seconds(dialect: str, end: Any, start: Any) -> Any:
    if dialect == "postgresql":
        return func.extract("epoch", end - start)
    return (func.julianday(end) - func.julianday(start)) * 86400.0


def _bucket(value: Any, bounds: Sequence[float]) -> Any:
    """The index ``bisect_left(bounds, value)`` (``len(bounds)`` past the last)."""
    whens = [(value <= bound, index) for index, bound in enumerate(bounds)]
    return case(*whens, else_=len(bounds))


def _history_query(dialect: str, bounds: Sequence[float]) -> Select[Any]:
    from toolsafe.recovery.states import TERMINAL

    terminal = [state.value for state in TERMINAL]
    raw_took = _seconds(dialect, step_events.c.at, steps.c.created_at)
    moved = or_(
        step_events.c.from_state.is_(None), step_events.c.from_state != step_events.c.to_state
    )
    took = case(
        (
            and_(step_events.c.to_state.in_(terminal), moved),
            case((raw_took < 0, 0.0), else_=raw_took),
        ),
        else_=None,
    )
    # The start of the verification round an exit from verifying ends, looked up once
    # per such event (a lateral join; for any other event its filter is false at once).
    entry = step_events.alias("entry")
    since = (
        select(func.max(entry.c.at).label("since"))
        .where(
            step_events.c.from_state == _VERIFYING,
            step_events.c.to_state != _VERIFYING,
            entry.c.operation_ref == step_events.c.operation_ref,
            entry.c.id < step_events.c.id,
            entry.c.to_state == _VERIFYING,
            or_(entry.c.from_state.is_(None), entry.c.from_state != _VERIFYING),
        )
        .lateral("round")
    )
    raw_waited = _seconds(dialect, step_events.c.at, since.c.since)
    waited = case((raw_waited < 0, 0.0), else_=raw_waited)
    inner = (
        select(*_COLUMNS[2:9], took.label("took"), waited.label("waited"))
        .select_from(
            step_events.outerjoin(steps, steps.c.id == step_events.c.step_id).join(since, true())
        )
        .where(step_events.c.id <= bindparam("upto"))
        .subquery()
    )
    keys = [inner.c[index] for index in range(7)]
    took_bucket = case((inner.c.took.is_(None), None), else_=_bucket(inner.c.took, bounds))
    waited_bucket = case((inner.c.waited.is_(None), None), else_=_bucket(inner.c.waited, bounds))
    return select(
        *keys,
        func.count(),
        took_bucket,
        func.coalesce(func.sum(inner.c.took), 0.0),
        waited_bucket,
        func.coalesce(func.sum(inner.c.waited), 0.0),
    ).group_by(*keys, took_bucket, waited_bucket)


def settled_position(store: StepStore, before: datetime) -> int:
    """The highest id among events written before ``before``: every id below it has
    committed or never will (no write transaction stays open that long)."""
    query = select(func.max(step_events.c.id)).where(step_events.c.at < before)
    return int(_read(store, lambda conn: conn.execute(query).scalar(), scan=True) or 0)


def history(store: StepStore, upto: int, bounds: Sequence[float]) -> list[EventGroup]:
    """Every event with an id up to ``upto``, grouped in the database (one pass)."""

    def work(conn: Connection) -> list[EventGroup]:
        query = _history_query(conn.dialect.name, bounds)
        groups = []
        for values in conn.execute(query, {"upto": upto}):
            kind, src, dst, reason, claim, commit_state, tool = values[:7]
            events, took_bucket, took_sum, waited_bucket, waited_sum = values[7:]
            groups.append(
                EventGroup(
                    kind,
                    _STATES[src],
                    _STATES[dst],
                    reason,
                    claim,
                    commit_state,
                    tool,
                    int(events),
                    took_bucket,
                    float(took_sum),
                    waited_bucket,
                    float(waited_sum),
                )
            )
        return groups

    return _read(store, work, scan=True)


class SqlTally:
    """:class:`~toolsafe.recovery.store.tally.TallyPort` over a SQL store's event table."""

    def __init__(self, store: StepStore) -> None:
        self._store = store

    def events_after(
        self, after: int, awaited: Sequence[int] = (), limit: int = 10_000
    ) -> list[EventRow]:
        return events_after(self._store, after, awaited, limit)

    def last_event_id(self) -> int:
        return last_event_id(self._store)

    def history(self, before: datetime, bounds: Sequence[float]) -> tuple[int, list[EventGroup]]:
        if self._store.engine.dialect.name != "postgresql":
            # SQLite has no exact time arithmetic in SQL (julianday is a double of days),
            # and an embedded store is small: read it event by event.
            return 0, []
        upto = settled_position(self._store, before)
        return upto, history(self._store, upto, bounds) if upto else []
