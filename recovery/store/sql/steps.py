"""The SQL step store: every operation one transaction, every change a guarded
compare-and-set, every change an event row in the same transaction (R2, R3, R8, R10).

It satisfies the port (``toolsafe.recovery.store.port``); ``docs/store.md`` describes
each operation.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from sqlalchemy import Connection, Engine, Row, select

from toolsafe.adapters.envelope import CommitState
from toolsafe.recovery.db import READ_ONLY, with_db_retry
from toolsafe.recovery.outcomes import (
    Decision,
    Executed,
    LookedUp,
    Outcome,
)
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import (
    Claim,
    ClaimKind,
    CountSources,
    EventRecord,
    EventSummary,
    Recorded,
    Refused,
    StepRecord,
    StepSummary,
    event_record,
    step_record,
)
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import plan
from toolsafe.recovery.store.actions import StepActions
from toolsafe.recovery.store.errors import StepNotFound
from toolsafe.recovery.store.shared import ClaimShortcuts, Jitter, needs_step
from toolsafe.recovery.store.sql import leases as leases
from toolsafe.recovery.store.sql import ops as ops
from toolsafe.recovery.store.sql import outbox as outbox
from toolsafe.recovery.store.sql import statements as sql
from toolsafe.recovery.store.sql import sweep as sweep
from toolsafe.recovery.store.sql.feed import ChangeFeed
from toolsafe.recovery.store.sql.overview import state_condition
from toolsafe.recovery.store.sql.submits import StepSubmits
from toolsafe.recovery.store.submission import valid_operation_ref

if TYPE_CHECKING:
    from toolsafe.recovery.store.plan import Step

__all__ = ["StepStore"]

T = TypeVar("T")

_BATCH: Final = 5_000
_EVENT_SUMMARY: Final = select(
    step_events.c.id,
    step_events.c.operation_ref,
    step_events.c.at,
    step_events.c.kind,
    step_events.c.from_state,
    step_events.c.to_state,
    step_events.c.detail["reason"].as_string(),
    step_events.c.detail["claim"].as_string(),
    step_events.c.detail[("envelope", "commit_state")].as_string(),
)


def _summaries(conn: Connection, prefix: str | None) -> list[StepSummary]:
    query = select(steps.c.operation_ref, steps.c.state, steps.c.commit_state, steps.c.reason)
    if prefix:
        query = query.where(steps.c.operation_ref.startswith(prefix, autoescape=True))
    return [
        StepSummary(ref, StepState(state), cast(CommitState | None, commit_state), reason)
        for ref, state, commit_state, reason in conn.execute(query)
    ]


class StepStore(StepSubmits, StepActions, ClaimShortcuts):
    """SQLAlchemy implementation over PostgreSQL or SQLite (see ``toolsafe.recovery.db``).

    Every method is one transaction, run again by :func:`toolsafe.recovery.db.with_db_retry`
    when the connection drops (an infrastructure retry, never a business one).
    """

    def __init__(
        self, engine: Engine, *, rng: Jitter | None = None, poll_interval: float = 0.05
    ) -> None:
        self.engine = engine
        self._rng = rng or random.Random()
        self.outbox = outbox.Outbox(self._write, self._read)
        self._poll_interval = poll_interval
        self._feed: ChangeFeed | None = None
        self._feed_lock = threading.Lock()

    @property
    def feed(self) -> ChangeFeed:
        """The change feed over this store's database, started by its first waiter."""
        with self._feed_lock:
            if self._feed is None:
                self._feed = ChangeFeed(self.engine, self._poll_interval)
            return self._feed

    def _write(self, work: Callable[[Connection], T]) -> T:
        def attempt() -> T:
            with self.engine.begin() as conn:
                return work(conn)

        return with_db_retry(attempt)

    def _write_hot(self, work: Callable[[Connection], T]) -> T:
        """The worker's claims and records on PostgreSQL, each statement committed on its
        own (autocommit) on an unpinged connection (``_write_one_statement``). An
        execution claim and a record are ONE statement (the row's compare-and-set and
        its event): one round trip instead of three (``BEGIN``, the statement,
        ``COMMIT``; four where the pool pings). A verification claim reads the row, then
        writes its compare-and-set; a refused claim reads the row, then appends its
        ``noop`` event: under READ COMMITTED those were never one snapshot, and the
        compare-and-set guards on the version read. SQLite keeps its transaction."""
        if self.engine.dialect.name == "postgresql":
            return self._write_one_statement(work)
        return self._write(work)

    def _read(self, work: Callable[[Connection], T]) -> T:
        def attempt() -> T:
            with self.engine.connect() as conn:
                conn.execution_options(**{READ_ONLY: True})
                with conn.begin():
                    return work(conn)

        return with_db_retry(attempt)

    # -------------------------------------------------------------- submit and read

    def get(self, operation_ref: str) -> StepRecord:
        if not valid_operation_ref(operation_ref):
            raise StepNotFound(operation_ref)  # no step can have it: no query needed
        row = self._read(lambda conn: sql.fetch(conn, operation_ref))
        if row is None:
            raise StepNotFound(operation_ref)
        return step_record(row)

    def events(self, operation_ref: str) -> list[EventRecord]:
        """Every event about the operation_ref, oldest first (including ``noop``s about
        an operation_ref that has no step), each envelope an event names in its step
        filled in from it (``shared.with_envelopes``)."""

        def work(conn: Connection) -> list[EventRecord]:
            found = [event_record(row) for row in conn.execute(sql.EVENTS, {"ref": operation_ref})]
            if not any(needs_step(event) for event in found):
                return found  # the common read: no envelope to fill in, no step to read
            return sql.filled_events(
                conn.execute(sql.EVENTS_WITH_ENVELOPE, {"ref": operation_ref}).all()
            )

        return self._read(work)

    def list_steps(
        self,
        states: Sequence[StepState] | None = None,
        limit: int = 100,
        *,
        tool: str | None = None,
        prefix: str | None = None,
    ) -> list[StepRecord]:
        """The newest steps first, optionally only those in ``states``, of ``tool``, or
        whose operation_ref starts with ``prefix``."""
        if limit < 0:
            raise ValueError(f"limit must be 0 or more, not {limit}")
        query = select(steps).order_by(steps.c.id.desc()).limit(limit)
        if states is not None:
            if not states:
                return []
            query = query.where(state_condition(states))
        if tool is not None:
            query = query.where(steps.c.tool == tool)
        if prefix:
            query = query.where(steps.c.operation_ref.startswith(prefix, autoescape=True))
        return [step_record(row) for row in self._read(lambda conn: conn.execute(query).all())]

    def step_summaries(self, prefix: str | None = None) -> list[StepSummary]:
        """Every step (or those whose operation_ref starts with ``prefix``), in no order."""
        return self._read(lambda conn: _summaries(conn, prefix))

    def count_sources(self, prefix: str | None = None) -> CountSources:
        """Steps and events (optionally by operation_ref prefix) in one read transaction.

        Only the event fields the counts read leave the database (the noop reason, the
        escalation reason, the kind of claim and the recorded commit_state), not the
        envelopes.
        """

        def work(conn: Connection) -> CountSources:
            found = _summaries(conn, prefix)
            query = _EVENT_SUMMARY
            if prefix:
                query = query.where(step_events.c.operation_ref.startswith(prefix, autoescape=True))
            events: list[EventSummary] = []
            result = conn.execute(query, execution_options={"yield_per": _BATCH})
            for id_, ref, at, kind, src, dst, reason, claim, commit_state in result:
                detail = {"reason": reason, "claim": claim, "commit_state": commit_state}
                events.append(
                    EventSummary(
                        id=id_,
                        operation_ref=ref,
                        at=at,
                        kind=kind,
                        from_state=None if src is None else StepState(src),
                        to_state=None if dst is None else StepState(dst),
                        detail={key: value for key, value in detail.items() if value is not None},
                    )
                )
            return CountSources(found, events)

        return self._read(work)

    # -------------------------------------------------------------- the worker's path

    def claim(
        self, kind: ClaimKind, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        """An execution claim (pending / due waiting_retry → in_flight, attempt + 1,
        lease) or a verification claim (a due ``verifying`` step gets a lease); or why
        not (and a ``noop`` event naming it), with the due time of an early hint."""
        claim_for = ops.claim_execution if kind == "execute" else ops.claim_verification
        row = self._write_hot(lambda conn: claim_for(conn, operation_ref, owner, lease, now))
        return row if isinstance(row, Refused) else Claim(kind, owner, step_record(row))

    def record(
        self,
        claim: Claim,
        outcome: Executed | LookedUp,
        *,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        rng: Jitter,
    ) -> Recorded | None:
        """Decide and write the outcome if the claim still holds (CAS on version and
        lease owner); None when the lease was lost.

        An escalation is written in a transaction: its handlers' notice (the outbox
        row) commits with it or not at all. Every other outcome is one statement."""
        planned = plan.recorded(claim.step, outcome, traits=traits, policy=policy, now=now, rng=rng)
        write = self._write if planned.decision.state is StepState.ESCALATED else self._write_hot
        decided = write(
            lambda conn: ops.record(
                conn, claimed=claim.step, owner=claim.owner, planned=planned, now=now
            )
        )
        return None if decided is None else Recorded(*decided)

    # -------------------------------------------------------------- leases

    def renew_lease(
        self, held: StepRecord, owner: str, lease: timedelta, now: datetime
    ) -> StepRecord | None:
        """A running call's heartbeat: the lease runs to ``now + lease`` if ``owner``
        still holds the step as ``held`` (state, version, owner); the row with its new
        version, or None when the lease was taken over (the call must record nothing).

        On PostgreSQL the renewal is one statement committed on its own (autocommit):
        no transaction stays open between round trips, so a worker cut off or stopped
        between its UPDATE and its COMMIT cannot leave the step's row locked, which
        would hide the lease from the sweeper (it skips locked rows) until the server
        noticed the dead connection."""

        def renew(conn: Connection) -> Row[Any] | None:
            return leases.renew(conn, held, owner, lease, now)

        write = (
            self._write_one_statement if self.engine.dialect.name == "postgresql" else self._write
        )
        row = write(renew)
        return None if row is None else step_record(row)

    def expire_lease_of_dead_owner(
        self,
        operation_ref: str,
        owner: str,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
    ) -> Recorded | None:
        """The caller proved ``owner`` dead: its step goes through the expired lease's
        transition (R4) now, not when the lease runs out. None when ``owner`` no longer
        holds the step (recorded, renewed by nobody else, taken over)."""
        decided = self._write(
            lambda conn: leases.expire_dead_owner(
                conn,
                operation_ref,
                owner,
                now=now,
                traits_for=traits_for,
                policy_for=policy_for,
                rng=self._rng,
            )
        )
        return None if decided is None else Recorded(step_record(decided[0]), decided[1])

    def leases_held_by(self, prefix: str) -> list[StepRecord]:
        """Leased steps whose owner name starts with ``prefix`` (``host:pid:``)."""
        return [step_record(row) for row in self._read(lambda conn: leases.held_by(conn, prefix))]

    # -------------------------------------------------------------- the sweeper

    def expire_leases(
        self,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
        limit: int = 100,
        rng: Jitter | None = None,
    ) -> list[Recorded]:
        """in_flight with an expired lease → verifying (R4); an expired verification
        lease is released so the step is due again."""
        decided = self._write(
            lambda conn: sweep.expire_leases(
                conn,
                now=now,
                traits_for=traits_for,
                policy_for=policy_for,
                limit=limit,
                rng=rng or self._rng,
            )
        )
        return [Recorded(step_record(row), decision) for row, decision in decided]

    def due_work(self, now: datetime, limit: int, republish_after: timedelta) -> list[StepRecord]:
        """Steps in pending / waiting_retry / verifying that are due and not leased and
        whose last publish is older than ``republish_after`` (or never); marks them
        published at ``now``. ``FOR UPDATE SKIP LOCKED`` on PostgreSQL."""
        if republish_after <= timedelta(0):
            raise ValueError("republish_after must be positive, or every sweep republishes")
        rows = self._write(
            lambda conn: sweep.due_work(conn, now=now, limit=limit, cutoff=now - republish_after)
        )
        return [step_record(row) for row in rows]

    def release_parked(self, now: datetime, horizon: datetime, limit: int) -> list[StepRecord]:
        """Parked delays due by ``horizon``, marked published at their due time (the
        release timer, ``tasks/release.py``). ``FOR UPDATE SKIP LOCKED`` on PostgreSQL."""
        if horizon < now:
            raise ValueError("horizon must not be before now")
        if self.engine.dialect.name == "sqlite" and not self._read(
            lambda conn: sweep.any_parked(conn, now=now, horizon=horizon)
        ):
            return []  # every tick would otherwise take SQLite's one write lock
        rows = self._write(
            lambda conn: sweep.release_parked(conn, now=now, horizon=horizon, limit=limit)
        )
        return [step_record(row) for row in rows]

    def lost_hints(
        self,
        now: datetime,
        since: datetime | None,
        until: datetime,
        eta_until: datetime,
        limit: int,
    ) -> list[StepRecord]:
        """Unleased work whose hint went out inside a broker's loss window (``sweep.
        lost_guard``): due now → marked published at ``now``; due later → un-parked for
        the release timer. ``FOR UPDATE SKIP LOCKED`` on PostgreSQL."""
        if until > now or eta_until < until or (since is not None and since > until):
            raise ValueError("a loss window runs since <= until <= now, eta_until >= until")
        rows = self._write(
            lambda conn: sweep.lost_hints(
                conn, now=now, since=since, until=until, eta_until=eta_until, limit=limit
            )
        )
        return [step_record(row) for row in rows]

    def mark_published(self, operation_ref: str, now: datetime) -> None:
        """The step's message went out at ``now`` (bookkeeping: no version, no event)."""
        parameters = {"ref": operation_ref, "published_at": now}
        # On PostgreSQL bookkeeping alone: one statement on its own, without the flush's
        # wait (R1).
        postgres = self.engine.dialect.name == "postgresql"
        statement = sql.MARK_PUBLISHED_UNSYNCED if postgres else sql.MARK_PUBLISHED
        updated = self._write_hot(lambda conn: conn.execute(statement, parameters).rowcount)
        if updated == 0:
            raise StepNotFound(operation_ref)

    def take_hints(
        self, now: datetime, limit: int, operation_refs: Collection[str] | None = None
    ) -> list[tuple[str, str]]:
        """The hint relay's steps (``sweep.take_hints``); ``SKIP LOCKED`` on PostgreSQL."""
        if operation_refs is not None and not operation_refs:
            return []
        if operation_refs is not None and self.engine.dialect.name == "postgresql":
            # One statement, its own transaction: one round trip per round of the relay.
            refs = operation_refs
            return self._write_one_statement(
                lambda conn: sweep.take_heard_hints(conn, now=now, limit=limit, operation_refs=refs)
            )
        return self._write(
            lambda conn: sweep.take_hints(conn, now=now, limit=limit, operation_refs=operation_refs)
        )

    def hints_not_sent(self, operation_refs: Collection[str], stamp: datetime) -> None:
        if operation_refs:
            self._write(
                lambda conn: sweep.hints_not_sent(conn, operation_refs=operation_refs, stamp=stamp)
            )

    # -------------------------------------------------------------- agents and operators

    def _act(
        self,
        operation_ref: str,
        outcome_for: Callable[[Step], Outcome],
        *,
        kind: str,
        detail: Mapping[str, Any],
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> Recorded:
        def work(conn: Connection) -> tuple[Row[Any], Decision] | None:
            current = sql.fetch(conn, operation_ref, lock=True)
            if current is None:
                raise StepNotFound(operation_ref)
            planned = plan.acted(
                current,
                outcome_for(current),
                kind=kind,
                detail=detail,
                traits=traits,
                policy=policy,
                now=now,
                rng=self._rng,
                extra=extra,
            )
            row = sql.cas_update(conn, current, planned.values, now, change=planned.change)
            return None if row is None else (row, planned.decision)

        decided = self._write(work)
        if decided is None:
            raise plan.changed_meanwhile(operation_ref, kind)
        return Recorded(step_record(decided[0]), decided[1])

    def _note(
        self, operation_ref: str, *, kind: str, label: str, detail: Mapping[str, Any], now: datetime
    ) -> StepState:
        def work(conn: Connection) -> StepState:
            current = sql.fetch(conn, operation_ref, lock=True)
            if current is None:
                raise StepNotFound(operation_ref)
            sql.append_event(
                conn,
                step_id=current.id,
                operation_ref=operation_ref,
                at=now,
                kind=kind,
                from_state=current.state,
                to_state=current.state,
                label=label,
                detail=detail,
            )
            return StepState(current.state)

        return self._write(work)
