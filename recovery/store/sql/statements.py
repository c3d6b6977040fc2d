"""Statement primitives of the store: reading a step, appending an event row, and the
guarded compare-and-set, with its event in the same statement on PostgreSQL (R10)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    Insert,
    Row,
    Select,
    String,
    Update,
    bindparam,
    insert,
    select,
    text,
    update,
)

from toolsafe.recovery.records import EventRecord, StepRecord, event_record
from toolsafe.recovery.rows import json_ready
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import Change, with_envelopes
from toolsafe.recovery.store.sql import outbox
from toolsafe.recovery.store.sql.compiled import compiled_for

__all__ = [
    "BY_REF",
    "EVENTS",
    "EVENTS_WITH_ENVELOPE",
    "Change",
    "append_event",
    "cas_update",
    "event_parameters",
    "fetch",
    "filled_events",
    "with_event",
]


# The hot statements are built once with bind parameters: building and cache-keying a
# Core statement per call costs more than the database round trip it describes.
BY_REF = select(steps).where(steps.c.operation_ref == bindparam("ref"))
BY_REF_LOCKED = BY_REF.with_for_update()
_BY_ID = select(steps).where(steps.c.id == bindparam("id"))
_EVENT = insert(step_events)
_CAS: dict[tuple[tuple[str, ...], bool, bool, bool], Update | Select[Any]] = {}
# What a slim compare-and-set returns: enough to know it matched, to log its event and
# to write an escalation notice, and ``published_at``, the one column written without a
# new version (``mark_published``, the sweeper); the caller knows the rest of the row.
_SLIM = (steps.c.id, steps.c.operation_ref, steps.c.state, steps.c.version, steps.c.published_at)
ESCALATED: Final = StepState.ESCALATED.value
_EVENT_COLUMNS = ("step_id", "operation_ref", "at", "kind", "from_state", "to_state", "label")


def fetch(conn: Connection, operation_ref: str, *, lock: bool = False) -> Row[Any] | None:
    query = BY_REF_LOCKED if lock and conn.dialect.name == "postgresql" else BY_REF
    return conn.execute(query, {"ref": operation_ref}).first()


def fetch_by_id(conn: Connection, step_id: int) -> Row[Any] | None:
    return conn.execute(_BY_ID, {"id": step_id}).first()


def append_event(
    conn: Connection,
    *,
    step_id: int | None,
    operation_ref: str,
    at: datetime,
    kind: str,
    from_state: str | None,
    to_state: str | None,
    label: str,
    detail: Mapping[str, Any],
) -> int:
    """Append one event row; returns its id."""
    inserted = conn.execute(
        _EVENT,
        {
            "step_id": step_id,
            "operation_ref": operation_ref,
            "at": at,
            "kind": kind,
            "from_state": from_state,
            "to_state": to_state,
            "label": label,
            "detail": json_ready(detail),
        },
    )
    key = inserted.inserted_primary_key
    if key is None:  # pragma: no cover - an INSERT always has its primary key
        raise RuntimeError("the event row came back without its id")
    return int(key[0])


def event_parameters(change: Change, from_state: str | None, at: datetime) -> dict[str, Any]:
    return {
        "ev_at": at,
        "ev_kind": change.kind,
        "ev_from_state": from_state,
        "ev_label": change.label,
        "ev_detail": json_ready(change.detail),
    }


EventColumns = Callable[[Any], tuple[ColumnElement[Any], ColumnElement[Any], ColumnElement[Any]]]


def with_event(
    moved_by: Update | Insert, columns: EventColumns | None = None, *, event_id: bool = False
) -> Select[Any]:
    """PostgreSQL: the state change and its event row (R10) in ONE statement,
    ``WITH moved AS (<change> RETURNING *), logged AS (INSERT INTO step_events …
    SELECT … FROM moved) SELECT * FROM moved``. No row moved, no event written.

    The event's ``to_state`` is the row's new state; its ``from_state``, label and
    detail are bound (``ev_*``) unless ``columns`` builds them from ``moved``;
    ``event_id`` adds the new event's id to the row, as ``event_id``.
    """
    moved = moved_by.cte("moved")
    from_state: ColumnElement[Any]
    label: ColumnElement[Any]
    detail: ColumnElement[Any]
    if columns is None:
        from_state, label, detail = (
            bindparam("ev_from_state", type_=String()),
            bindparam("ev_label", type_=String()),
            bindparam("ev_detail", type_=step_events.c.detail.type),
        )
    else:
        from_state, label, detail = columns(moved)
    values = select(
        moved.c.id,
        moved.c.operation_ref,
        bindparam("ev_at", type_=step_events.c.at.type),
        bindparam("ev_kind", type_=String()),
        from_state,
        moved.c.state,
        label,
        detail,
    )
    appended = insert(step_events).from_select([*_EVENT_COLUMNS, "detail"], values)
    if not event_id:
        return select(moved).add_cte(appended.cte("logged"))
    logged = appended.returning(step_events.c.id, step_events.c.step_id).cte("logged")
    return select(moved, logged.c.id.label("event_id")).join_from(
        moved, logged, logged.c.step_id == moved.c.id
    )


def _cas_statement(
    columns: tuple[str, ...], owned: bool, logged: bool, slim: bool = False
) -> Update | Select[Any]:
    key = (columns, owned, logged, slim)
    statement = _CAS.get(key)
    if statement is None:
        guard = [
            steps.c.id == bindparam("cas_id"),
            steps.c.state == bindparam("cas_state"),
            steps.c.version == bindparam("cas_version"),
        ]
        if owned:
            guard.append(steps.c.lease_owner == bindparam("cas_owner"))
        values: dict[str, Any] = {
            column: bindparam(f"set_{column}", type_=steps.c[column].type) for column in columns
        }
        change = (
            update(steps)
            .where(*guard)
            .values(
                **values,
                version=steps.c.version + 1,
                updated_at=bindparam("set_updated_at", type_=steps.c.updated_at.type),
            )
            .returning(*(_SLIM if slim else steps.c))
        )
        statement = with_event(change) if logged else change
        _CAS[key] = statement
    return statement


def cas_update(
    conn: Connection,
    row: Row[Any] | StepRecord,
    values: Mapping[str, Any],
    now: datetime,
    *,
    lease_owner: str | None = None,
    change: Change | None = None,
    slim: bool = False,
) -> Row[Any] | None:
    """``UPDATE … WHERE id AND state AND version [AND lease_owner]``; None when it lost.

    With ``change``, the event row is appended in the same transaction when the update
    matched: on PostgreSQL in the same statement, elsewhere as a second one. ``slim``
    returns only id, operation_ref, state, version and published_at (no JSON columns to
    decode) for a caller that builds the new row from the one it had
    (``rows.updated_record``).
    """
    columns = tuple(sorted(values))
    parameters = {f"set_{column}": values[column] for column in columns}
    from_state = str(row.state)
    parameters.update(
        cas_id=row.id, cas_state=from_state, cas_version=row.version, set_updated_at=now
    )
    if lease_owner is not None:
        parameters["cas_owner"] = lease_owner
    one_statement = change is not None and conn.dialect.name == "postgresql"
    if one_statement and change is not None:
        parameters.update(event_parameters(change, from_state, now))
    statement = _cas_statement(columns, lease_owner is not None, one_statement, slim)
    moved: Row[Any] | None
    if one_statement and slim:
        # The worker's record: compiled once, run on the driver's cursor.
        moved = compiled_for(statement, conn.dialect).first(conn, parameters)
    else:
        moved = conn.execute(statement, parameters).first()
    if moved is not None and moved.state == ESCALATED and from_state != ESCALATED:
        # The notice the handlers are owed commits with the escalation, or neither does.
        outbox.add_notice(conn, moved, now)
    if moved is not None and change is not None and not one_statement:
        append_event(
            conn,
            step_id=moved.id,
            operation_ref=moved.operation_ref,
            at=now,
            kind=change.kind,
            from_state=from_state,
            to_state=moved.state,
            label=change.label,
            detail=change.detail,
        )
    return moved


# Built once, like the hot statements above: the client runs these on every submit and view.
EVENTS: Final = (
    select(step_events)
    .where(step_events.c.operation_ref == bindparam("ref"))
    .order_by(step_events.c.id)
)
# The events with their step's envelope, read in ONE statement (one snapshot, also under
# READ COMMITTED): an event that names the envelope must be read with the envelope the
# step held when the event was read, not one a change committed in between.
EVENTS_WITH_ENVELOPE: Final = (
    select(
        step_events,
        select(steps.c.last_envelope)
        .where(steps.c.operation_ref == bindparam("ref"))
        .scalar_subquery()
        .label("step_envelope"),
    )
    .where(step_events.c.operation_ref == bindparam("ref"))
    .order_by(step_events.c.id)
)


def filled_events(rows: Sequence[Row[Any]]) -> list[EventRecord]:
    """The rows of ``EVENTS_WITH_ENVELOPE`` as events, every envelope an event names
    filled in from its step's (``shared.with_envelopes``)."""
    latest = rows[0].step_envelope if rows else None
    return with_envelopes([event_record(row) for row in rows], latest)


# Hint bookkeeping commits without waiting for the WAL flush. A statement that writes
# only ``published_at`` (what went to the broker, and when) carries this always-true
# condition: evaluating it turns ``synchronous_commit`` off for its own transaction
# alone (``set_config(…, true)``: the setting ends with the transaction, pooled
# connections keep the server's), so PostgreSQL answers without the flush's wait. A
# server crash may lose such a stamp from its last moments, never a step or an event:
# the stamp is then older than the truth, and what is older is sent again (the sweep's
# ``due_work``, the relay's catch-up) — a hint twice, which R1 makes harmless. A later
# synchronous commit (the claim that the hint leads to) flushes it anyway: the WAL is
# written in order. Never on a statement that writes anything else.
UNSYNCED: Final = text("set_config('synchronous_commit', 'off', true) IS NOT NULL")


def bookkeeping(postgres: bool) -> tuple[Any, ...]:
    """The conditions a hint-bookkeeping statement adds to its ``WHERE``: ``UNSYNCED`` on
    PostgreSQL, nothing elsewhere."""
    return (UNSYNCED,) if postgres else ()


def _mark_published(postgres: bool) -> Any:
    return (
        update(steps)
        .where(steps.c.operation_ref == bindparam("ref"), *bookkeeping(postgres))
        .values(published_at=bindparam("published_at", type_=steps.c.published_at.type))
    )


# The step's hint went out (``mark_published``): on PostgreSQL one statement committed
# on its own, without the flush's wait (``UNSYNCED``); elsewhere inside a transaction.
MARK_PUBLISHED: Final = _mark_published(postgres=False)
MARK_PUBLISHED_UNSYNCED: Final = _mark_published(postgres=True)
