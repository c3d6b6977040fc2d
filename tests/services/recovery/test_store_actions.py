"""Agent and operator actions through the store: corrected input, approvals,
cancellation and resolution. A refusal raises and writes nothing."""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    create_step,
    escalate,
    force,
    needs_approval,
    unknown,
)
from toolsafe.adapters.protocol import FieldError
from toolsafe.recovery.outcomes import Executed, TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.sql import StepStore

S = StepState
RNG = random.Random(3)
LATER = T0 + timedelta(minutes=5)
REF = "run_81/step_4"


def _after(store: StepStore, envelope_for: Any, ref: str = REF) -> None:
    create_step(store, "create_invoice", INPUT, operation_ref=ref, policy=POLICY, now=T0)
    claim = store.claim_execution(ref, "worker-1", LEASE, T0)
    assert claim is not None
    store.record(claim, Executed(envelope_for(ref)), traits=WRITE, policy=POLICY, now=T0, rng=RNG)


def _valid(_: Mapping[str, Any]) -> list[FieldError]:
    return []


def _unchanged(store: StepStore, ref: str, call: Any) -> TransitionRefused:
    """Run a refused action; check that it wrote nothing."""
    before, events = store.get(ref), store.events(ref)
    with pytest.raises(TransitionRefused) as raised:
        call()
    assert store.get(ref) == before and store.events(ref) == events
    return raised.value


def test_provide_input_sends_the_corrected_call_under_the_same_ref(store: StepStore) -> None:
    _after(store, correct_input)
    old = store.get(REF)
    fixed = {**INPUT, "recipient_email": "billing@example.com"}
    recorded = store.provide_input(
        REF, fixed, validate=_valid, traits=WRITE, policy=POLICY, now=LATER
    )
    step = recorded.step
    assert (step.state, step.operation_ref, step.input, step.due_at) == (
        S.PENDING,
        REF,
        fixed,
        LATER,
    )
    assert step.input_hash != old.input_hash and recorded.decision.input_hash == step.input_hash
    assert step.attempts == old.attempts
    event = store.events(REF)[-1]
    assert (event.kind, event.from_state, event.to_state) == (
        "input_provided",
        S.NEEDS_INPUT,
        S.PENDING,
    )
    assert event.detail["input_hash"] == step.input_hash
    assert event.detail["changed_fields"] == ["recipient_email"]
    assert "billing@example.com" not in str(event.detail)
    assert store.claim_execution(REF, "worker-2", LEASE, LATER) is not None


def test_provide_input_refusals(store: StepStore) -> None:
    _after(store, correct_input)

    def send(data: Mapping[str, Any], validate: Any = _valid) -> Any:
        return lambda: store.provide_input(
            REF, data, validate=validate, traits=WRITE, policy=POLICY, now=LATER
        )

    same = dict(reversed(list(INPUT.items())))
    assert _unchanged(store, REF, send(same)).code == "IDENTICAL_INPUT"
    assert _unchanged(store, REF, send({**INPUT, "amount": 5})).code == "FLAGGED_FIELD_UNCHANGED"

    def invalid(_: Mapping[str, Any]) -> list[FieldError]:
        return [FieldError("recipient_email", "VALUE_ERROR")]

    fixed = {**INPUT, "recipient_email": "x"}
    assert _unchanged(store, REF, send(fixed, invalid)).code == "CORRECTED_INPUT_INVALID"

    create_step(store, "t", {}, operation_ref="fresh", policy=POLICY, now=T0)
    refused = _unchanged(
        store,
        "fresh",
        lambda: store.provide_input(
            "fresh", {"a": 1}, validate=_valid, traits=WRITE, policy=POLICY, now=LATER
        ),
    )
    assert refused.code == "NOT_NEEDS_INPUT"
    with pytest.raises(StepNotFound):
        store.provide_input("ghost", {}, validate=_valid, traits=WRITE, policy=POLICY, now=LATER)


def test_approve_binds_to_the_input_hash(store: StepStore) -> None:
    _after(store, needs_approval)
    step = store.get(REF)
    assert step.state is S.AWAITING_APPROVAL and step.approval_input_hash == step.input_hash
    refused = _unchanged(
        store,
        REF,
        lambda: store.approve(
            REF,
            approver="ops@example.com",
            reason="ok",
            input_hash="sha256:other",
            traits=WRITE,
            policy=POLICY,
            now=LATER,
        ),
    )
    assert refused.code == "APPROVAL_INPUT_MISMATCH"
    recorded = store.approve(
        REF,
        approver="ops@example.com",
        reason="customer confirmed",
        input_hash=step.input_hash,
        traits=WRITE,
        policy=POLICY,
        now=LATER,
    )
    assert recorded.step.state is S.PENDING and recorded.step.due_at == LATER
    event = store.events(REF)[-1]
    assert event.kind == "approved"
    assert (event.detail["approver"], event.detail["reason"]) == (
        "ops@example.com",
        "customer confirmed",
    )


def test_reject_fails_the_step(store: StepStore) -> None:
    _after(store, needs_approval)
    recorded = store.reject(
        REF, approver="ops", reason="not this one", traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.state is S.FAILED and recorded.step.reason == "REJECTED"
    event = store.events(REF)[-1]
    assert (event.kind, event.to_state, event.detail["approver"]) == ("rejected", S.FAILED, "ops")
    refused = _unchanged(
        store,
        REF,
        lambda: store.reject(REF, approver="o", reason="r", traits=WRITE, policy=POLICY, now=LATER),
    )
    assert refused.code == "NOT_AWAITING_APPROVAL"


def test_cancel_a_waiting_step_but_not_a_running_one(store: StepStore) -> None:
    create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    recorded = store.cancel(
        "r1", by="agent-7", reason="plan changed", traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.state is S.CANCELLED
    event = store.events("r1")[-1]
    assert (event.kind, event.detail["by"], event.detail["reason"]) == (
        "cancelled",
        "agent-7",
        "plan changed",
    )
    create_step(store, "t", {}, operation_ref="r2", policy=POLICY, now=T0)
    assert store.claim_execution("r2", "worker-1", LEASE, T0) is not None
    refused = _unchanged(
        store,
        "r2",
        lambda: store.cancel("r2", by="a", reason="r", traits=WRITE, policy=POLICY, now=LATER),
    )
    assert refused.code == "NOT_CANCELLABLE"


@pytest.mark.parametrize("to", [S.SUCCEEDED, S.FAILED])
def test_resolve_closes_an_escalated_step(store: StepStore, to: StepState) -> None:
    _after(store, escalate)
    assert store.get(REF).state is S.ESCALATED
    recorded = store.resolve(
        REF,
        operator="oncall",
        reason="checked the ledger",
        to=to,
        traits=WRITE,
        policy=POLICY,
        now=LATER,
        evidence="ledger/81" if to is S.SUCCEEDED else None,
    )
    assert recorded.step.state is to
    event = store.events(REF)[-1]
    assert (event.kind, event.from_state, event.to_state) == ("resolved", S.ESCALATED, to)
    assert (event.detail["operator"], event.detail["reason"]) == ("oncall", "checked the ledger")


def test_resolve_re_drives_with_a_fresh_budget(store: StepStore) -> None:
    _after(store, escalate)
    recorded = store.resolve(
        REF, operator="oncall", reason="fixed", to=S.PENDING, traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.state is S.PENDING
    assert recorded.step.max_attempts == recorded.step.attempts + POLICY.retry.max_attempts
    claim = store.claim_execution(REF, "worker-2", LEASE, LATER)
    assert claim is not None and claim.step.attempts == 2


def test_resolve_re_drive_of_an_unknown_outcome_verifies_first(store: StepStore) -> None:
    _after(store, unknown)
    # As after "lookup unavailable" too many times.
    force(store, REF, state="escalated", reason="LOOKUP_UNAVAILABLE", due_at=None)
    recorded = store.resolve(
        REF,
        operator="oncall",
        reason="lookup back",
        to=S.PENDING,
        traits=WRITE,
        policy=POLICY,
        now=LATER,
    )
    assert recorded.step.state is S.VERIFYING and recorded.step.commit_state == "unknown"


def test_resolve_refusals(store: StepStore) -> None:
    create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    refused = _unchanged(
        store,
        "r1",
        lambda: store.resolve(
            "r1", operator="o", reason="r", to=S.FAILED, traits=WRITE, policy=POLICY, now=LATER
        ),
    )
    assert refused.code == "NOT_ESCALATED"
    with pytest.raises(StepNotFound):
        store.cancel("ghost", by="a", reason="r", traits=WRITE, policy=POLICY, now=LATER)
