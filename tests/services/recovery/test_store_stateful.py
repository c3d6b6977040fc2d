"""Random sequences of store operations on real PostgreSQL against a small model:
only the lifecycle's transitions happen, never an execution claim while the outcome is
unknown, attempts stay within their limit, and every change leaves exactly one event."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, select

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    create_step,
    escalate,
    needs_approval,
    retry_later,
    success,
    unknown,
)
from tests.support.recovery.stores import empty
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupResult, LookupUnavailable
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
from toolsafe.recovery.schema import step_events
from toolsafe.recovery.states import ALLOWED, WAITING, WORK_STATES, StepState
from toolsafe.recovery.store import Claim, StepNotFound, StepRecord
from toolsafe.recovery.store.sql import StepStore

S = StepState
REFS = ("s0", "s1")
REF = st.sampled_from(REFS)
ENVELOPES: dict[str, Callable[[str, datetime], AnySuccess | ToolError]] = {
    "success": lambda ref, now: success(ref),
    "unknown": lambda ref, now: unknown(ref),
    "retry_later": lambda ref, now: retry_later(ref, now + timedelta(seconds=5)),
    "correct_input": lambda ref, now: correct_input(ref),
    "needs_approval": lambda ref, now: needs_approval(ref),
    "escalate": lambda ref, now: escalate(ref),
}
LOOKUPS: dict[str, Callable[[datetime], LookupResult]] = {
    "found": lambda now: LookupFound(checked_at=now, result={"id": 1}, evidence_ref="ev"),
    "not_found": lambda now: LookupNotFound(checked_at=now),
    "unavailable": lambda now: LookupUnavailable(checked_at=now),
}

KIND = st.sampled_from(sorted(ENVELOPES))
LOOKUP = st.sampled_from(sorted(LOOKUPS))


@dataclass
class Model:
    """What the test expects of one step, independent of the store's own bookkeeping."""

    state: StepState
    version: int


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, engine: Engine) -> None:
        super().__init__()
        empty(engine)
        self.store = StepStore(engine, rng=random.Random(0))
        self.rng = random.Random(0)
        self.now = T0
        self.model: dict[str, Model] = {}
        # Events per operation_ref, including noops about a ref with no step yet.
        self.events = dict.fromkeys(REFS, 0)
        self.claims: dict[str, Claim] = {}
        self.inputs: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- helpers

    def _in(self, *states: StepState) -> list[str]:
        return [ref for ref, model in self.model.items() if model.state in states]

    def _row(self, ref: str) -> StepRecord | None:
        try:
            return self.store.get(ref)
        except StepNotFound:
            return None

    def _changed(self, ref: str, before: StepState, after: StepRecord) -> None:
        assert (before, after.state) in ALLOWED, f"{before} -> {after.state}"
        note_event(f"{before} -> {after.state}")
        model = self.model[ref]
        model.state, model.version = after.state, model.version + 1
        self.events[ref] += 1

    def _refused_or_changed(self, ref: str, action: Callable[[], Any], sources: Any) -> None:
        before = self._row(ref)
        try:
            recorded = action()
        except TransitionRefused:
            return  # the invariants check that nothing was written
        except StepNotFound:
            assert before is None
            return
        assert before is not None and before.state in sources
        self._changed(ref, before.state, recorded.step)

    # ---------------------------------------------------------------- rules

    @rule(seconds=st.sampled_from([0, 1, 5, 11, 31, 120]))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    def create(self, ref: str) -> None:
        data = self.inputs.setdefault(ref, dict(INPUT))
        step, created = create_step(
            self.store, "create_invoice", data, operation_ref=ref, policy=POLICY, now=self.now
        )
        assert created == (ref not in self.model)
        if created:
            self.model[ref] = Model(S.PENDING, 1)
            self.events[ref] += 1
        assert step.state is self.model[ref].state

    @initialize()
    def submit_every_step(self) -> None:
        for ref in REFS:
            self.create(ref)

    @rule(
        ref=REF,
        what=st.sampled_from(
            ["submit", "execute", "verify", "input", "approve", "reject", "resolve"]
        ),
    )
    def redelivery(self, ref: str, what: str) -> None:
        """A duplicate, late or misdirected message or action: mostly a noop or a refusal."""
        if what == "submit":
            self.create(ref)
        elif what == "execute":
            self._claim_execution(ref)
        elif what == "verify":
            self._claim_verification(ref)
        elif what == "input":
            self.provide_input(ref, True)
        elif what == "approve":
            self.approve(ref)
        elif what == "reject":
            self.reject(ref)
        else:
            self.resolve(ref, S.PENDING)

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), kind=KIND, lookup=LOOKUP)
    def record(self, data: st.DataObject, kind: str, lookup: str) -> None:
        """A held claim's outcome, possibly after the lease was lost."""
        ref = data.draw(st.sampled_from(sorted(self.claims)))
        self._record(ref, self.claims.pop(ref), kind, lookup)

    @precondition(lambda self: bool(self._in(S.PENDING, S.WAITING_RETRY)))
    @rule(data=st.data(), kind=KIND)
    def execute(self, data: st.DataObject, kind: str) -> None:
        """A worker's whole turn: claim, call, record."""
        ref = data.draw(st.sampled_from(self._in(S.PENDING, S.WAITING_RETRY)))
        claim = self._claim_execution(ref)
        if claim is not None:
            self._record(ref, self.claims.pop(ref), kind, "found")

    @precondition(lambda self: bool(self._in(S.VERIFYING)))
    @rule(data=st.data(), lookup=LOOKUP)
    def verify(self, data: st.DataObject, lookup: str) -> None:
        ref = data.draw(st.sampled_from(self._in(S.VERIFYING)))
        claim = self._claim_verification(ref)
        if claim is not None:
            self._record(ref, self.claims.pop(ref), "success", lookup)

    def _claim_execution(self, ref: str) -> Claim | None:
        before = self._row(ref)
        claim = self.store.claim_execution(ref, f"w{self.rng.random()}", LEASE, self.now)
        expected = (
            before is not None
            and before.state in (S.PENDING, S.WAITING_RETRY)
            and before.commit_state != "unknown"
            and before.attempts < before.max_attempts
            and before.due_at is not None
            and before.due_at <= self.now
        )
        assert (claim is not None) == expected
        if claim is None:
            self.events[ref] += 1  # the noop
            return None
        assert before is not None and before.commit_state != "unknown"
        assert claim.step.attempts == before.attempts + 1
        self._changed(ref, before.state, claim.step)
        self.claims[ref] = claim
        return claim

    def _claim_verification(self, ref: str) -> Claim | None:
        before = self._row(ref)
        claim = self.store.claim_verification(ref, f"c{self.rng.random()}", LEASE, self.now)
        expected = (
            before is not None
            and before.state is S.VERIFYING
            and before.due_at is not None
            and before.due_at <= self.now
            and (before.lease_expires_at is None or before.lease_expires_at <= self.now)
        )
        assert (claim is not None) == expected
        if claim is None:
            self.events[ref] += 1
            return None
        assert before is not None
        self._changed(ref, before.state, claim.step)
        self.claims[ref] = claim
        return claim

    def _record(self, ref: str, claim: Claim, kind: str, lookup: str) -> None:
        before = self._row(ref)
        assert before is not None
        outcome = (
            Executed(ENVELOPES[kind](ref, self.now))
            if claim.kind == "execute"
            else LookedUp(LOOKUPS[lookup](self.now))
        )
        recorded = self.store.record(
            claim, outcome, traits=WRITE, policy=POLICY, now=self.now, rng=self.rng
        )
        assert (recorded is None) == (before.version != claim.step.version)
        if recorded is not None:
            assert recorded.decision.state is recorded.step.state
            self._changed(ref, before.state, recorded.step)

    @precondition(lambda self: bool(self._in(S.IN_FLIGHT, S.VERIFYING)))
    @rule()
    def expire_leases(self) -> None:
        rows = {ref: self._row(ref) for ref in self.model}
        expected = {
            ref
            for ref, row in rows.items()
            if row is not None
            and row.state in (S.IN_FLIGHT, S.VERIFYING)
            and row.lease_expires_at is not None
            and row.lease_expires_at <= self.now
        }
        expired = self.store.expire_leases(self.now, lambda _: WRITE, lambda _: POLICY)
        assert {r.step.operation_ref for r in expired} == expected
        for recorded in expired:
            ref = recorded.step.operation_ref
            before = rows[ref]
            assert before is not None
            self._changed(ref, before.state, recorded.step)

    @rule()
    def due_work(self) -> None:
        rows = {ref: self._row(ref) for ref in self.model}
        cutoff = self.now - timedelta(seconds=30)
        expected = {
            ref
            for ref, row in rows.items()
            if row is not None
            and row.state in WORK_STATES
            and row.due_at is not None
            and row.due_at <= self.now
            and (row.lease_expires_at is None or row.lease_expires_at <= self.now)
            and (row.published_at is None or row.published_at <= cutoff)
        }
        due = self.store.due_work(self.now, limit=10, republish_after=timedelta(seconds=30))
        assert {step.operation_ref for step in due} == expected

    @precondition(lambda self: bool(self._in(S.NEEDS_INPUT)))
    @rule(data=st.data(), change=st.booleans())
    def correct(self, data: st.DataObject, change: bool) -> None:
        self.provide_input(data.draw(st.sampled_from(self._in(S.NEEDS_INPUT))), change)

    @precondition(lambda self: bool(self._in(S.AWAITING_APPROVAL)))
    @rule(data=st.data(), approve=st.booleans())
    def decide_approval(self, data: st.DataObject, approve: bool) -> None:
        ref = data.draw(st.sampled_from(self._in(S.AWAITING_APPROVAL)))
        (self.approve if approve else self.reject)(ref)

    @precondition(lambda self: bool(self._in(S.ESCALATED)))
    @rule(data=st.data(), to=st.sampled_from([S.PENDING, S.SUCCEEDED, S.FAILED]))
    def operator(self, data: st.DataObject, to: StepState) -> None:
        self.resolve(data.draw(st.sampled_from(self._in(S.ESCALATED))), to)

    def provide_input(self, ref: str, change: bool) -> None:
        data = dict(self.inputs.get(ref, INPUT))
        if change:
            data["recipient_email"] = f"fixed{self.rng.randrange(10**6)}@example.com"

        def act() -> Any:
            recorded = self.store.provide_input(
                ref, data, validate=lambda _: [], traits=WRITE, policy=POLICY, now=self.now
            )
            self.inputs[ref] = data
            return recorded

        self._refused_or_changed(ref, act, {S.NEEDS_INPUT})

    def approve(self, ref: str) -> None:
        row = self._row(ref)
        digest = "sha256:none" if row is None else row.input_hash
        self._refused_or_changed(
            ref,
            lambda: self.store.approve(
                ref,
                approver="ops",
                reason="ok",
                input_hash=digest,
                traits=WRITE,
                policy=POLICY,
                now=self.now,
            ),
            {S.AWAITING_APPROVAL},
        )

    def reject(self, ref: str) -> None:
        self._refused_or_changed(
            ref,
            lambda: self.store.reject(
                ref, approver="ops", reason="no", traits=WRITE, policy=POLICY, now=self.now
            ),
            {S.AWAITING_APPROVAL},
        )

    @rule(ref=REF, dice=st.integers(0, 3))
    def cancel(self, ref: str, dice: int) -> None:
        if dice:  # a sink: rarer than the other rules, so that sequences get deep
            return
        self._refused_or_changed(
            ref,
            lambda: self.store.cancel(
                ref, by="agent", reason="plan changed", traits=WRITE, policy=POLICY, now=self.now
            ),
            WAITING,
        )

    def resolve(self, ref: str, to: StepState) -> None:
        self._refused_or_changed(
            ref,
            lambda: self.store.resolve(
                ref,
                operator="oncall",
                reason="checked",
                to=to,
                traits=WRITE,
                policy=POLICY,
                now=self.now,
                evidence="ledger/81",
                confirm_not_written=to is S.FAILED,
            ),
            {S.ESCALATED},
        )

    # ---------------------------------------------------------------- invariants

    @invariant()
    def store_agrees_with_the_model(self) -> None:
        rows = {row.operation_ref: row for row in self.store.list_steps()}
        assert set(rows) == set(self.model)
        for ref, model in self.model.items():
            row = rows[ref]
            assert (row.state, row.version) == (model.state, model.version)
            assert row.attempts <= row.max_attempts
        with self.store.engine.connect() as conn:
            events = conn.execute(select(step_events).order_by(step_events.c.id)).all()
        assert Counter(change.operation_ref for change in events) == +Counter(self.events)
        for change in events:
            edge = (change.from_state, change.to_state)
            if change.kind in ("claimed", "executed", "looked_up", "lease_expired"):
                assert edge in {(src.value, dst.value) for src, dst in ALLOWED}
            if change.kind == "claimed" and change.to_state == S.IN_FLIGHT:
                assert change.from_state in (S.PENDING, S.WAITING_RETRY)


@pytest.mark.postgres
@pytest.mark.slow
def test_store_state_machine_on_postgresql(store_pg_engine: Engine) -> None:
    class OnThisDatabase(StoreMachine):
        def __init__(self) -> None:
            super().__init__(store_pg_engine)

    run_state_machine_as_test(
        OnThisDatabase,
        settings=settings(
            max_examples=20,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
