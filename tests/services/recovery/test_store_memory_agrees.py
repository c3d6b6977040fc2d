"""The in-memory store and the SQL store in lockstep: random sequences of every port
operation on both, every answer and every refusal compared, and after each step the
steps, events and count sources compared too. Real SQLite (a fresh copy per example)."""

from __future__ import annotations

import contextlib
import random
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.support.recovery.store_support import (
    BLIND_WRITE,
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    escalate,
    needs_approval,
    retry_later,
    success,
    unknown,
)
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.protocol import (
    FieldError,
    LookupFound,
    LookupNotFound,
    LookupResult,
    LookupUnavailable,
)
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
from toolsafe.recovery.records import ClaimKind
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Claim, StepNotFound, StorePort
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.sql import StepStore

S = StepState
REFS = ("s0", "s1", "s2")
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


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What an operation answered: its value, or the refusal it raised."""
    try:
        return "value", call()
    except TransitionRefused as refused:
        return "refused", refused.code
    except (StepNotFound, ValueError) as error:
        return type(error).__name__, str(error)


class Lockstep(RuleBasedStateMachine):
    def __init__(self, sql: StepStore) -> None:
        super().__init__()
        self.sql = sql
        self.memory = MemoryStore(rng=random.Random(0))
        self.now = T0
        self.seed = 0
        self.claims: dict[str, Claim] = {}
        self.inputs: dict[str, dict[str, Any]] = {}

    def both(self, operation: Callable[[StorePort], Any]) -> Any:
        answer = _outcome(lambda: operation(self.memory))
        assert _outcome(lambda: operation(self.sql)) == answer
        return answer[1] if answer[0] == "value" else None

    @rule(seconds=st.sampled_from([0, 1, 5, 11, 31, 120]))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(ref=REF, variant=st.sampled_from(["same", "input", "tool", "stamped"]))
    def submit(self, ref: str, variant: str) -> None:
        data = dict(self.inputs.setdefault(ref, {**INPUT, "ref": ref}))
        tool = "send_email" if variant == "tool" else "create_invoice"
        if variant == "input":
            data["amount"] = -1
        stamp = self.now if variant == "stamped" else None
        self.both(
            lambda store: store.submit(
                tool, data, operation_ref=ref, policy=POLICY, now=self.now, published_at=stamp
            )
        )

    @rule(ref=REF)
    def claim_execution(self, ref: str) -> None:
        claim = self.both(lambda store: store.claim_execution(ref, "w1", LEASE, self.now))
        if claim is not None:
            self.claims[ref] = claim

    @rule(ref=REF)
    def claim_verification(self, ref: str) -> None:
        claim = self.both(lambda store: store.claim_verification(ref, "c1", LEASE, self.now))
        if claim is not None:
            self.claims[ref] = claim

    @rule(ref=REF, kind=st.sampled_from(["execute", "verify"]))
    def claim(self, ref: str, kind: ClaimKind) -> None:
        # The claim that says why not: the same reason, and the same due time.
        claim = self.both(lambda store: store.claim(kind, ref, "w2", LEASE, self.now))
        if isinstance(claim, Claim):
            self.claims[ref] = claim

    @precondition(lambda self: bool(self.claims))
    @rule(
        data=st.data(),
        kind=st.sampled_from(sorted(ENVELOPES)),
        lookup=st.sampled_from(sorted(LOOKUPS)),
        blind=st.booleans(),
    )
    def record(self, data: st.DataObject, kind: str, lookup: str, blind: bool) -> None:
        ref = data.draw(st.sampled_from(sorted(self.claims)))
        claim = self.claims.pop(ref)
        outcome = (
            Executed(ENVELOPES[kind](ref, self.now))
            if claim.kind == "execute"
            else LookedUp(LOOKUPS[lookup](self.now))
        )
        traits = BLIND_WRITE if blind else WRITE
        seed = self.seed = self.seed + 1
        self.both(
            lambda store: store.record(
                claim, outcome, traits=traits, policy=POLICY, now=self.now, rng=random.Random(seed)
            )
        )

    @rule(limit=st.integers(0, 3))
    def expire_leases(self, limit: int) -> None:
        seed = self.seed = self.seed + 1
        self.both(
            lambda store: store.expire_leases(
                self.now, lambda _: WRITE, lambda _: POLICY, limit, random.Random(seed)
            )
        )

    @rule(limit=st.integers(1, 3), seconds=st.sampled_from([0, 1, 30]))
    def due_work(self, limit: int, seconds: int) -> None:
        self.both(lambda store: store.due_work(self.now, limit, timedelta(seconds=seconds)))

    @rule(ref=REF)
    def mark_published(self, ref: str) -> None:
        self.both(lambda store: store.mark_published(ref, self.now))

    @rule(ref=REF, change=st.booleans(), valid=st.booleans())
    def provide_input(self, ref: str, change: bool, valid: bool) -> None:
        data = dict(self.inputs.get(ref, INPUT))
        if change:
            data["recipient_email"] = f"fixed{self.seed}@example.com"
        problems = [] if valid else [FieldError("recipient_email", "VALUE_ERROR")]
        recorded = self.both(
            lambda store: store.provide_input(
                ref, data, validate=lambda _: problems, traits=WRITE, policy=POLICY, now=self.now
            )
        )
        if recorded is not None:
            self.inputs[ref] = data

    @rule(ref=REF, matching=st.booleans())
    def approve(self, ref: str, matching: bool) -> None:
        digest = "sha256:other"
        if matching:
            with contextlib.suppress(StepNotFound):
                digest = self.memory.get(ref).input_hash
        self.both(
            lambda store: store.approve(
                ref,
                approver="ops",
                reason="ok",
                input_hash=digest,
                traits=WRITE,
                policy=POLICY,
                now=self.now,
            )
        )

    @rule(ref=REF)
    def reject(self, ref: str) -> None:
        self.both(
            lambda store: store.reject(
                ref, approver="ops", reason="no", traits=WRITE, policy=POLICY, now=self.now
            )
        )

    @rule(ref=REF)
    def cancel(self, ref: str) -> None:
        self.both(
            lambda store: store.cancel(
                ref, by="agent", reason="plan changed", traits=WRITE, policy=POLICY, now=self.now
            )
        )

    @rule(ref=REF, to=st.sampled_from([S.PENDING, S.SUCCEEDED, S.FAILED]), proof=st.booleans())
    def resolve(self, ref: str, to: StepState, proof: bool) -> None:
        # Without proof, a success lacks evidence and a failure of an unknown write lacks
        # the statement: both stores refuse alike.
        self.both(
            lambda store: store.resolve(
                ref,
                operator="oncall",
                reason="checked",
                to=to,
                traits=WRITE,
                policy=POLICY,
                now=self.now,
                evidence="ledger/81" if proof else None,
                confirm_not_written=proof and to is S.FAILED,
            )
        )

    @invariant()
    def the_stores_hold_the_same(self) -> None:
        assert self.memory.list_steps() == self.sql.list_steps()
        for ref in (*REFS, "unknown"):
            assert self.memory.events(ref) == self.sql.events(ref)
        memory, sql = self.memory.count_sources(), self.sql.count_sources()
        assert sorted(memory.steps, key=repr) == sorted(sql.steps, key=repr)
        assert sorted(memory.events, key=lambda e: e.id) == sorted(sql.events, key=lambda e: e.id)
        assert sorted(self.memory.step_summaries("s1"), key=repr) == sorted(
            self.sql.step_summaries("s1"), key=repr
        )


def test_the_memory_store_answers_as_sqlite_does(sqlite_template: Path, tmp_path: Path) -> None:
    copies = iter(range(10**6))

    class OnAFreshCopy(Lockstep):
        def __init__(self) -> None:
            path = tmp_path / f"lockstep-{next(copies)}.db"
            shutil.copyfile(sqlite_template, path)
            engine = make_engine(f"sqlite:///{path}")
            super().__init__(StepStore(engine, rng=random.Random(0)))
            self.engine = engine

        def teardown(self) -> None:
            self.engine.dispose()

    run_state_machine_as_test(
        OnAFreshCopy,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
