"""Retention and key rotation over the step store: purge terminal steps (their events and
stored inputs go with them) in batches, and re-seal stored secret inputs under the newest
key. Each batch is one transaction; a step that is not terminal is never touched."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, or_, select, update

from toolsafe.recovery.db import with_db_retry
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.secrets import is_sealed
from toolsafe.recovery.states import TERMINAL, StepState
from toolsafe.recovery.store.retention import PURGEABLE, PurgeReport
from toolsafe.recovery.store.sql.steps import StepStore

__all__ = ["SqlRetention", "purge", "reseal_inputs"]


def _in_transaction(store: StepStore, work: Callable[[Connection], Any]) -> Any:
    def attempt() -> Any:
        with store.engine.begin() as conn:
            return work(conn)

    return with_db_retry(attempt)


def purge(
    store: StepStore,
    before: datetime,
    *,
    states: Iterable[StepState] = PURGEABLE,
    batch: int = 500,
    dry_run: bool = False,
) -> PurgeReport:
    """Delete terminal steps last changed before ``before``, with their events (noops
    about their operation_ref included), ``batch`` steps per transaction."""
    chosen = sorted(StepState(state).value for state in states)
    if not chosen or any(StepState(state) not in TERMINAL for state in chosen):
        raise ValueError(f"purge removes terminal steps only, not {chosen}")
    if batch <= 0:
        raise ValueError("batch must be positive")
    guard = (steps.c.state.in_(chosen), steps.c.updated_at < before)
    totals: dict[str, int] = {}
    events = batches = 0
    last_id = 0

    def one_batch(conn: Connection) -> tuple[list[Any], int]:
        query = (
            select(steps.c.id, steps.c.operation_ref, steps.c.state)
            .where(*guard, steps.c.id > last_id)
            .order_by(steps.c.id)
            .limit(batch)
        )
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        rows = list(conn.execute(query).all())
        if not rows or dry_run:
            counted = 0
            if rows:
                refs = [row.operation_ref for row in rows]
                counted = len(
                    conn.execute(
                        select(step_events.c.id).where(step_events.c.operation_ref.in_(refs))
                    ).all()
                )
            return rows, counted
        ids = [row.id for row in rows]
        refs = [row.operation_ref for row in rows]
        gone = conn.execute(
            delete(step_events).where(
                or_(step_events.c.step_id.in_(ids), step_events.c.operation_ref.in_(refs))
            )
        ).rowcount
        # The same guard again: a row that changed state since the SELECT stays (SQLite
        # has no row locks; PostgreSQL holds them).
        deleted = conn.execute(
            delete(steps).where(steps.c.id.in_(ids), *guard).returning(steps.c.id)
        ).all()
        kept = set(ids) - {row.id for row in deleted}
        if kept:  # pragma: no cover - needs a state change inside the transaction
            raise RuntimeError("a step changed while it was purged; run purge again")
        return rows, int(gone)

    while True:
        rows, counted = _in_transaction(store, one_batch)
        if not rows:
            break
        batches += 1
        events += counted
        for row in rows:
            totals[row.state] = totals.get(row.state, 0) + 1
        last_id = rows[-1].id
        if len(rows) < batch:
            break
    return PurgeReport(sum(totals.values()), events, totals, batches, dry_run)


def reseal_inputs(
    store: StepStore, rotate: Callable[[dict[str, Any]], dict[str, Any]], *, batch: int = 500
) -> int:
    """Re-encrypt every stored sealed input with ``rotate`` (``SecretBox.rotate``); the
    number of steps rewritten. Bookkeeping: no version, no event; a step that changed
    meanwhile keeps its newer input (which was sealed with the newest key already)."""
    rewritten = 0
    last_id = 0

    def one_batch(conn: Connection) -> tuple[int, int]:
        rows = conn.execute(
            select(steps.c.id, steps.c.version, steps.c.input)
            .where(steps.c.id > last_id)
            .order_by(steps.c.id)
            .limit(batch)
        ).all()
        done = 0
        for row in rows:
            if not any(is_sealed(value) for value in dict(row.input).values()):
                continue
            done += conn.execute(
                update(steps)
                .where(steps.c.id == row.id, steps.c.version == row.version)
                .values(input=rotate(dict(row.input)))
            ).rowcount
        return (rows[-1].id if rows else 0), done

    while True:
        last, done = _in_transaction(store, one_batch)
        rewritten += int(done)
        if last == 0:
            return rewritten
        last_id = last


class SqlRetention:
    """:class:`~toolsafe.recovery.store.retention.RetentionPort` over a SQL store."""

    def __init__(self, store: StepStore) -> None:
        self._store = store

    def purge(
        self,
        before: datetime,
        *,
        states: Iterable[StepState] = PURGEABLE,
        batch: int = 500,
        dry_run: bool = False,
    ) -> PurgeReport:
        return purge(self._store, before, states=states, batch=batch, dry_run=dry_run)

    def reseal_inputs(
        self, rotate: Callable[[dict[str, Any]], dict[str, Any]], *, batch: int = 500
    ) -> int:
        return reseal_inputs(self._store, rotate, batch=batch)
