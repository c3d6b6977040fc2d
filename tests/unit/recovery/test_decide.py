"""The decision function, one test per row of the lifecycle table (DESIGN §5)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from tests.support import fixtures
from tests.support.recovery.decide_factories import (
    INPUT_HASH,
    NOW,
    POLICY,
    READ,
    WRITE_NO_LOOKUP,
    correct_input,
    error,
    run,
    step,
    success,
    unknown,
    wait_and_retry,
)
from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.protocol import FieldError, LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.recovery import reasons as R
from toolsafe.recovery.backoff import retry_delay, verification_delay
from toolsafe.recovery.decide import IllegalTransition
from toolsafe.recovery.outcomes import (
    Approved,
    Cancelled,
    Decision,
    Executed,
    InputCorrected,
    LeaseExpired,
    LookedUp,
    Outcome,
    Rejected,
    Resolved,
    StepSnapshot,
    TransitionRefused,
)
from toolsafe.recovery.states import LABELS, TERMINAL, WAITING, StepState

S = StepState
NEW_HASH = "sha256:" + "1" * 64


def assert_edge(src: StepState, decision: Decision, dst: StepState) -> None:
    assert decision.state is dst
    assert decision.label == LABELS[(src, dst)]


# ------------------------------------------------------------------ in_flight → …


def test_success_with_evidence_succeeds() -> None:
    decision = run(step(), Executed(success()))
    assert_edge(S.IN_FLIGHT, decision, S.SUCCEEDED)
    assert decision.action == "succeed"
    assert decision.commit_state == "committed"
    assert decision.evidence_ref == "invoice/INV-1"


def test_correct_input_waits_for_the_flagged_fields() -> None:
    decision = run(step(), Executed(correct_input("recipient_email, amount")))
    assert_edge(S.IN_FLIGHT, decision, S.NEEDS_INPUT)
    assert decision.action == "wait_input"
    assert decision.fields == ("amount", "recipient_email")
    assert decision.commit_state == "not_committed"
    # The envelope's 1 allowed the corrected call; once corrected the step gets the
    # tool's whole budget again, counted from its 1 claimed attempt.
    assert decision.max_attempts == 1 + POLICY.retry.max_attempts


def test_article_invalid_recipient_address_waits_for_recipient_email() -> None:
    envelope = fixtures.invalid_recipient_address()
    decision = run(step(operation_ref=envelope.operation_ref), Executed(envelope))
    assert decision.state is S.NEEDS_INPUT
    assert decision.fields == ("recipient_email",)


def test_wait_and_retry_waits_until_not_before() -> None:
    not_before = NOW + timedelta(minutes=10)
    decision = run(step(), Executed(wait_and_retry(not_before)))
    assert_edge(S.IN_FLIGHT, decision, S.WAITING_RETRY)
    assert decision.action == "run"
    assert decision.commit_state == "not_committed"
    assert decision.due_at == not_before  # later than any backoff of the default policy
    assert decision.max_attempts == 4  # min(5, 1 + 3)


def test_wait_and_retry_backs_off_when_not_before_is_sooner() -> None:
    snapshot = step(attempts=3)
    decision = run(snapshot, Executed(wait_and_retry(NOW + timedelta(milliseconds=1))), seed=3)
    expected = NOW + retry_delay(POLICY, 3, random.Random(3))
    assert decision.due_at == max(expected, NOW + timedelta(milliseconds=1))


@pytest.mark.parametrize(
    "envelope",
    [unknown("verify_operation"), unknown("escalate")],
    ids=["verify_operation", "escalate"],
)
def test_unknown_write_goes_to_verification(envelope: ToolError) -> None:
    decision = run(step(), Executed(envelope))
    assert_edge(S.IN_FLIGHT, decision, S.VERIFYING)
    assert decision.action == "verify"
    assert decision.commit_state == "unknown"
    assert decision.verification_attempts == 0
    assert decision.lookups_unavailable == 0
    assert decision.due_at == NOW + verification_delay(POLICY, 0, random.Random(7))
    assert decision.due_at is not None
    assert decision.due_at - NOW <= POLICY.verification.base_delay


def test_verify_operation_not_committed_goes_to_verification() -> None:
    envelope = error(next_action="verify_operation", directive="never", category="conflict")
    decision = run(step(), Executed(envelope))
    assert_edge(S.IN_FLIGHT, decision, S.VERIFYING)
    # Verification settles it; until then the runtime treats the outcome as unknown.
    assert decision.commit_state == "unknown"


def test_lease_expired_on_a_write_goes_to_verification() -> None:
    decision = run(step(), LeaseExpired())
    assert_edge(S.IN_FLIGHT, decision, S.VERIFYING)
    assert decision.commit_state == "unknown"
    assert decision.verification_attempts == 0


def test_lease_expired_on_a_read_retries_now() -> None:
    decision = run(step(traits=READ), LeaseExpired())
    assert_edge(S.IN_FLIGHT, decision, S.WAITING_RETRY)
    assert decision.due_at == NOW
    assert decision.commit_state == "not_committed"


def test_lease_expired_on_a_read_without_attempts_escalates() -> None:
    decision = run(step(traits=READ, attempts=5), LeaseExpired())
    assert_edge(S.IN_FLIGHT, decision, S.ESCALATED)
    assert decision.reason == R.ATTEMPTS_EXHAUSTED


def test_request_approval_binds_the_input_hash() -> None:
    decision = run(step(), Executed(fixtures.missing_approval()))
    assert_edge(S.IN_FLIGHT, decision, S.AWAITING_APPROVAL)
    assert decision.action == "wait_approval"
    assert decision.approval_input_hash == INPUT_HASH


def test_request_approval_without_attempts_left_escalates() -> None:
    envelope = error(next_action="request_approval", category="authorization", remaining=0)
    decision = run(step(), Executed(envelope))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.ATTEMPTS_EXHAUSTED


def test_escalate_envelope_escalates_with_its_code() -> None:
    decision = run(step(), Executed(fixtures.version_conflict()))
    assert_edge(S.IN_FLIGHT, decision, S.ESCALATED)
    assert decision.action == "escalate"
    assert decision.reason == "VERSION_CONFLICT"


def test_unknown_without_lookup_escalates_as_unverifiable() -> None:
    decision = run(step(traits=WRITE_NO_LOOKUP), Executed(unknown()))
    assert_edge(S.IN_FLIGHT, decision, S.ESCALATED)
    assert decision.reason == R.UNVERIFIABLE_UNKNOWN
    assert decision.commit_state == "unknown"


def test_lease_expired_on_a_write_without_lookup_escalates_as_unverifiable() -> None:
    decision = run(step(traits=WRITE_NO_LOOKUP), LeaseExpired())
    assert decision.state is S.ESCALATED
    assert decision.reason == R.UNVERIFIABLE_UNKNOWN


def test_success_for_another_operation_ref_is_treated_as_unknown_for_a_write() -> None:
    decision = run(step(), Executed(success(operation_ref="run_81/step_5")))
    assert decision.state is S.VERIFYING
    assert decision.commit_state == "unknown"


def test_error_for_another_operation_ref_escalates_a_read() -> None:
    decision = run(step(traits=READ), Executed(error(operation_ref="run_81/step_5")))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.OPERATION_REF_MISMATCH


# ------------------------------------------------------------------ verifying → …


def verifying(**changes: Any) -> StepSnapshot:
    return step(S.VERIFYING, commit_state="unknown", **changes)


def test_lookup_found_succeeds_with_evidence() -> None:
    found = LookupFound(checked_at=NOW, result={"id": "INV-1"}, evidence_ref="invoice/INV-1")
    decision = run(verifying(), LookedUp(found))
    assert_edge(S.VERIFYING, decision, S.SUCCEEDED)
    assert decision.commit_state == "committed"
    assert decision.evidence_ref == "invoice/INV-1"


def test_not_found_inside_the_window_verifies_again_with_backoff() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", verification_attempts=2)
    decision = run(snapshot, LookedUp(LookupNotFound(checked_at=NOW)), seed=11)
    assert_edge(S.VERIFYING, decision, S.VERIFYING)
    assert decision.action == "verify"
    assert decision.verification_attempts == 3
    assert decision.due_at == NOW + verification_delay(POLICY, 3, random.Random(11))
    assert decision.commit_state == "unknown"


def test_not_found_after_the_window_retries_now_with_the_same_operation() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", last_sent_at=NOW - timedelta(seconds=31))
    decision = run(snapshot, LookedUp(LookupNotFound(checked_at=NOW)))
    assert_edge(S.VERIFYING, decision, S.WAITING_RETRY)
    assert decision.action == "run"
    assert decision.commit_state == "not_committed"
    assert decision.due_at == NOW
    assert decision.verification_attempts == 0


def test_not_found_exactly_at_the_window_end_is_proof_of_absence() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", last_sent_at=NOW - timedelta(seconds=30))
    decision = run(snapshot, LookedUp(LookupNotFound(checked_at=NOW)))
    assert decision.state is S.WAITING_RETRY


def test_not_found_after_the_window_without_attempts_escalates() -> None:
    snapshot = step(
        S.VERIFYING,
        commit_state="unknown",
        attempts=5,
        last_sent_at=NOW - timedelta(minutes=5),
    )
    decision = run(snapshot, LookedUp(LookupNotFound(checked_at=NOW)))
    assert_edge(S.VERIFYING, decision, S.ESCALATED)
    assert decision.reason == R.ATTEMPTS_EXHAUSTED
    assert decision.commit_state == "not_committed"


def test_lookup_unavailable_verifies_again_and_counts() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", lookups_unavailable=1)
    decision = run(snapshot, LookedUp(LookupUnavailable(checked_at=NOW)), seed=5)
    assert_edge(S.VERIFYING, decision, S.VERIFYING)
    assert decision.lookups_unavailable == 2
    assert decision.due_at == NOW + verification_delay(POLICY, 2, random.Random(5))
    assert decision.verification_attempts is None  # unchanged


def test_lookup_unavailable_past_the_budget_escalates() -> None:
    limit = POLICY.verification.max_unavailable
    budget = POLICY.verification.budget
    snapshot = step(
        S.VERIFYING, commit_state="unknown", lookups_unavailable=limit - 1,
        last_sent_at=NOW - budget,
    )  # fmt: skip
    decision = run(snapshot, LookedUp(LookupUnavailable(checked_at=NOW)))
    assert_edge(S.VERIFYING, decision, S.ESCALATED)
    assert decision.reason == R.LOOKUP_UNAVAILABLE
    assert decision.commit_state == "unknown"


def test_verification_without_lookup_escalates() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", traits=WRITE_NO_LOOKUP)
    decision = run(
        snapshot, LookedUp(LookupUnavailable(checked_at=NOW, code="LOOKUP_NOT_PROVIDED"))
    )
    assert_edge(S.VERIFYING, decision, S.ESCALATED)
    assert decision.reason == R.NO_LOOKUP


def test_lease_expired_while_verifying_verifies_again_now() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", verification_attempts=2)
    decision = run(snapshot, LeaseExpired())
    assert_edge(S.VERIFYING, decision, S.VERIFYING)
    assert decision.due_at == NOW
    assert decision.verification_attempts is None
    assert decision.lookups_unavailable is None


# ------------------------------------------------------------------ agent and operator


def test_corrected_input_goes_back_to_pending() -> None:
    snapshot = step(S.NEEDS_INPUT, commit_state="not_committed", flagged_fields=("amount",))
    outcome = InputCorrected(new_input_hash=NEW_HASH, changed_fields=frozenset({"amount"}))
    decision = run(snapshot, outcome)
    assert_edge(S.NEEDS_INPUT, decision, S.PENDING)
    assert decision.action == "run"
    assert decision.due_at == NOW
    assert decision.input_hash == NEW_HASH


def test_approval_of_the_requested_input_goes_to_pending() -> None:
    snapshot = step(S.AWAITING_APPROVAL, approval_input_hash=INPUT_HASH)
    decision = run(snapshot, Approved(approver="ops@x", reason="ok", input_hash=INPUT_HASH))
    assert_edge(S.AWAITING_APPROVAL, decision, S.PENDING)
    assert decision.due_at == NOW
    assert decision.extra == {"approver": "ops@x", "reason": "ok"}


def test_rejection_fails_the_step() -> None:
    snapshot = step(S.AWAITING_APPROVAL, approval_input_hash=INPUT_HASH)
    decision = run(snapshot, Rejected(approver="ops@x", reason="too much"))
    assert_edge(S.AWAITING_APPROVAL, decision, S.FAILED)
    assert decision.action == "fail"
    assert decision.reason == R.REJECTED


@pytest.mark.parametrize("state", sorted(WAITING))
def test_waiting_states_can_be_cancelled(state: StepState) -> None:
    decision = run(step(state), Cancelled(by="agent-svc", reason="user gave up"))
    assert_edge(state, decision, S.CANCELLED)
    assert decision.action == "cancel"
    assert decision.extra == {"by": "agent-svc", "reason": "user gave up"}


def test_a_step_verifying_an_unknown_write_cannot_be_cancelled() -> None:
    # The downstream may hold the write; cancelling would hide it from everyone.
    snapshot = step(S.VERIFYING, commit_state="unknown")
    with pytest.raises(TransitionRefused) as refused:
        run(snapshot, Cancelled(by="agent-svc", reason="user gave up"))
    assert refused.value.code == R.UNKNOWN_NOT_CANCELLABLE
    assert "unknown" in refused.value.message


@pytest.mark.parametrize("state", sorted({S.IN_FLIGHT} | TERMINAL))
def test_other_states_cannot_be_cancelled(state: StepState) -> None:
    with pytest.raises(TransitionRefused) as refused:
        run(step(state), Cancelled(by="agent-svc", reason="stop"))
    assert refused.value.code == R.NOT_CANCELLABLE
    assert str(state) in refused.value.message


def escalated(**changes: Any) -> StepSnapshot:
    return step(S.ESCALATED, attempts=5, **changes)


@pytest.mark.parametrize("to", [S.SUCCEEDED, S.FAILED])
def test_operator_closes_an_escalated_step(to: StepState) -> None:
    evidence = "inv_123" if to is S.SUCCEEDED else None
    outcome = Resolved(operator="op", reason="checked by phone", to=to, evidence=evidence)
    decision = run(escalated(commit_state="not_committed"), outcome)
    assert_edge(S.ESCALATED, decision, to)
    assert decision.reason == R.OPERATOR_RESOLVED
    recorded = {"evidence": evidence} if evidence else {}
    assert decision.extra == {"operator": "op", "reason": "checked by phone", **recorded}


def test_operator_redrive_gets_a_fresh_budget() -> None:
    snapshot = escalated(commit_state="not_committed", fingerprint_repeats=3)
    decision = run(snapshot, Resolved(operator="op", reason="fixed", to=S.PENDING))
    assert_edge(S.ESCALATED, decision, S.PENDING)
    assert decision.due_at == NOW
    assert decision.max_attempts == 5 + POLICY.retry.max_attempts
    assert decision.fingerprint_repeats == 0


def test_operator_redrive_of_an_unknown_outcome_verifies_first() -> None:
    snapshot = escalated(commit_state="unknown")
    decision = run(snapshot, Resolved(operator="op", reason="lookup is back", to=S.PENDING))
    assert_edge(S.ESCALATED, decision, S.VERIFYING)
    assert decision.action == "verify"
    assert decision.commit_state == "unknown"
    assert decision.verification_attempts == 0
    assert decision.lookups_unavailable == 0
    assert decision.max_attempts == 5 + POLICY.retry.max_attempts


def test_operator_redrive_of_an_unknown_outcome_without_lookup_is_refused() -> None:
    snapshot = escalated(commit_state="unknown", traits=WRITE_NO_LOOKUP)
    with pytest.raises(TransitionRefused) as refused:
        run(snapshot, Resolved(operator="op", reason="try again", to=S.PENDING))
    assert refused.value.code == R.REDRIVE_UNVERIFIABLE


@pytest.mark.parametrize("to", [s for s in S if s not in {S.PENDING, S.SUCCEEDED, S.FAILED}])
def test_resolution_to_another_state_is_refused(to: StepState) -> None:
    with pytest.raises(TransitionRefused) as refused:
        run(escalated(), Resolved(operator="op", reason="x", to=to))
    assert refused.value.code == R.INVALID_RESOLUTION
    assert str(to) in refused.value.message


@pytest.mark.parametrize("state", [s for s in S if s is not S.ESCALATED])
def test_resolution_of_a_step_not_escalated_is_refused(state: StepState) -> None:
    with pytest.raises(TransitionRefused) as refused:
        run(step(state), Resolved(operator="op", reason="x", to=S.FAILED))
    assert refused.value.code == R.NOT_ESCALATED


# ------------------------------------------------------------------ refusals by state

WORKER_OUTCOMES: dict[str, tuple[Outcome, frozenset[StepState]]] = {
    "executed": (Executed(success()), frozenset({S.IN_FLIGHT})),
    "looked_up": (LookedUp(LookupNotFound(checked_at=NOW)), frozenset({S.VERIFYING})),
    "lease_expired": (LeaseExpired(), frozenset({S.IN_FLIGHT, S.VERIFYING})),
}


@pytest.mark.parametrize(
    ("name", "state"),
    [(name, state) for name, (_, ok) in WORKER_OUTCOMES.items() for state in S if state not in ok],
)
def test_worker_outcome_in_a_state_it_does_not_apply_to_is_stale(
    name: str, state: StepState
) -> None:
    outcome, _ = WORKER_OUTCOMES[name]
    with pytest.raises(TransitionRefused) as refused:
        run(step(state), outcome)
    assert refused.value.code == R.STALE_OUTCOME
    assert str(state) in refused.value.message


@pytest.mark.parametrize("state", [s for s in S if s is not S.NEEDS_INPUT])
def test_corrected_input_outside_needs_input_is_refused(state: StepState) -> None:
    outcome = InputCorrected(new_input_hash=NEW_HASH, changed_fields=frozenset({"amount"}))
    with pytest.raises(TransitionRefused) as refused:
        run(step(state), outcome)
    assert refused.value.code == R.NOT_NEEDS_INPUT


@pytest.mark.parametrize("state", [s for s in S if s is not S.AWAITING_APPROVAL])
@pytest.mark.parametrize(
    "outcome",
    [Approved(approver="a", reason="r", input_hash=INPUT_HASH), Rejected(approver="a", reason="r")],
    ids=["approved", "rejected"],
)
def test_approval_outside_awaiting_approval_is_refused(state: StepState, outcome: Outcome) -> None:
    with pytest.raises(TransitionRefused) as refused:
        run(step(state, approval_input_hash=INPUT_HASH), outcome)
    assert refused.value.code == R.NOT_AWAITING_APPROVAL


def test_invalid_input_field_errors_are_named() -> None:
    snapshot = step(S.NEEDS_INPUT, flagged_fields=("recipient_email",))
    outcome = InputCorrected(
        new_input_hash=NEW_HASH,
        changed_fields=frozenset({"recipient_email"}),
        field_errors=(FieldError(field="recipient_email", code="VALUE_ERROR"),),
    )
    with pytest.raises(TransitionRefused) as refused:
        run(snapshot, outcome)
    assert refused.value.code == R.CORRECTED_INPUT_INVALID
    assert "recipient_email (VALUE_ERROR)" in refused.value.message


def test_refusals_survive_pickling() -> None:
    import pickle

    refused = TransitionRefused(R.IDENTICAL_INPUT, "same input")
    copy = pickle.loads(pickle.dumps(refused))
    assert (copy.code, copy.message, str(copy)) == (refused.code, refused.message, str(refused))
    illegal = IllegalTransition("pending", "succeeded")
    assert str(pickle.loads(pickle.dumps(illegal))) == str(illegal)


def test_an_edge_outside_the_table_raises() -> None:
    from toolsafe.recovery import decide as module

    with pytest.raises(IllegalTransition):
        module._to(step(S.PENDING), S.SUCCEEDED, "succeed", "committed")
