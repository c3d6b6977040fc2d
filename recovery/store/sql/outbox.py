"""The escalation outbox's statements: a notice written with the escalation itself, handed
out again by the sweeper until acknowledged, once however many sweepers run (R9)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    bindparam,
    insert,
    or_,
    select,
    text,
    update,
)

from toolsafe.recovery.schema import OPEN_NOTICE_PREDICATE, escalation_outbox
from toolsafe.recovery.store.shared import (
    MAX_BACKOFF_FACTOR,
    OutboxNotice,
    checked_notice_outcome,
    dedup_key,
    resend_delay,
)

OUTBOX = escalation_outbox


def notice_record(row: Row[Any]) -> OutboxNotice:
    return OutboxNotice(
        id=row.id,
        step_id=row.step_id,
        operation_ref=row.operation_ref,
        dedup_key=row.dedup_key,
        created_at=row.created_at,
        sends=row.sends,
        last_sent_at=row.last_sent_at,
        acknowledged_at=row.acknowledged_at,
        outcome=row.outcome,
    )


_ADD = insert(OUTBOX)


def add_notice(conn: Connection, step: Row[Any], now: datetime) -> None:
    """The notice for a step that has just been escalated, in the same transaction. Its
    first send is the hint published right after the commit; the sweeper sends it again
    when that is ``resend_after`` old and no handler run acknowledged it."""
    conn.execute(
        _ADD,
        {
            "step_id": step.id,
            "operation_ref": step.operation_ref,
            "dedup_key": dedup_key(step.operation_ref, step.version),
            "created_at": now,
            "sends": 1,
            "last_sent_at": now,
        },
    )


_OPEN = (
    select(OUTBOX)
    .where(OUTBOX.c.operation_ref == bindparam("ref"), OUTBOX.c.acknowledged_at.is_(None))
    .order_by(OUTBOX.c.id)
)
_ALL = select(OUTBOX).where(OUTBOX.c.operation_ref == bindparam("ref")).order_by(OUTBOX.c.id)


def notices(conn: Connection, operation_ref: str, *, open_only: bool) -> list[OutboxNotice]:
    rows = conn.execute(_OPEN if open_only else _ALL, {"ref": operation_ref}).all()
    return [notice_record(row) for row in rows]


def acknowledge(conn: Connection, notice_id: int, now: datetime, outcome: str) -> bool:
    """Close an open notice; False when it was closed already (by a concurrent run)."""
    checked_notice_outcome(outcome)
    closed = conn.execute(
        update(OUTBOX)
        .where(OUTBOX.c.id == notice_id, OUTBOX.c.acknowledged_at.is_(None))
        .values(acknowledged_at=now, outcome=outcome)
    )
    return closed.rowcount == 1


def _due(now: datetime, resend_after: timedelta) -> ColumnElement[bool]:
    """Open, and its last send older than the wait its count of sends has earned: one
    bound comparison per doubling (a handful), portable to every database."""
    steps_of_backoff = MAX_BACKOFF_FACTOR.bit_length()  # 1, 2, 4, ... 64: seven waits
    waits = []
    for sends in range(1, steps_of_backoff + 1):
        cutoff = now - resend_delay(resend_after, sends)
        count = OUTBOX.c.sends == sends if sends < steps_of_backoff else OUTBOX.c.sends >= sends
        waits.append(and_(count, OUTBOX.c.last_sent_at <= cutoff))
    # The literal predicate (not a bound one) lets PostgreSQL use the partial index.
    return and_(text(OPEN_NOTICE_PREDICATE), or_(*waits))


def due_notices(
    conn: Connection, *, now: datetime, limit: int, resend_after: timedelta
) -> list[OutboxNotice]:
    """Open notices due for a re-send, the longest waiting first (ties by id), each
    counted as sent at ``now``. The UPDATE is a compare-and-set on ``sends``, so two
    sweepers never both hand out the same notice."""
    query = (
        select(OUTBOX)
        .where(_due(now, resend_after))
        .order_by(OUTBOX.c.last_sent_at, OUTBOX.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    taken: list[OutboxNotice] = []
    for row in conn.execute(query).all():
        moved = conn.execute(
            update(OUTBOX)
            .where(
                OUTBOX.c.id == row.id,
                OUTBOX.c.sends == row.sends,
                OUTBOX.c.acknowledged_at.is_(None),
            )
            .values(sends=row.sends + 1, last_sent_at=now)
            .returning(*OUTBOX.c)
        ).first()
        if moved is not None:
            taken.append(notice_record(moved))
    return taken


Work = Callable[[Callable[[Connection], Any]], Any]


class Outbox:
    """The outbox behind the step store (``StepStore.outbox``); each call is one
    transaction of the store's, retried like its others when the connection drops."""

    def __init__(self, write: Work, read: Work) -> None:
        self._write = write
        self._read = read

    def notices(self, operation_ref: str, *, open_only: bool = False) -> list[OutboxNotice]:
        """The step's notices, oldest first (only the unacknowledged ones if asked)."""
        found: list[OutboxNotice] = self._read(
            lambda conn: notices(conn, operation_ref, open_only=open_only)
        )
        return found

    def acknowledge(self, notice_id: int, now: datetime, outcome: str = "delivered") -> bool:
        """A handler run took the notice (or it is moot: ``step_moved_on``)."""
        closed: bool = self._write(lambda conn: acknowledge(conn, notice_id, now, outcome))
        return closed

    def due(self, now: datetime, limit: int, resend_after: timedelta) -> list[OutboxNotice]:
        """Open notices whose last send is old enough, counted as sent again at ``now``."""
        if resend_after <= timedelta(0):
            raise ValueError("resend_after must be positive, or every sweep re-sends")
        taken: list[OutboxNotice] = self._write(
            lambda conn: due_notices(conn, now=now, limit=limit, resend_after=resend_after)
        )
        return taken
