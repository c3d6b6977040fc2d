"""The runtime guards of DESIGN §6, each with its own test."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from datetime import timedelta
from typing import ClassVar

import pytest
from pydantic import BaseModel, ValidationError

from tests.support.recovery.decide_factories import (
    INPUT,
    INPUT_HASH,
    NOW,
    POLICY,
    READ,
    REF,
    WRITE,
    WRITE_NO_LOOKUP,
    correct_input,
    error,
    run,
    step,
    unknown,
    wait_and_retry,
)
from toolsafe.adapters.envelope import (
    CATEGORIES,
    AnySuccess,
    Category,
    NextAction,
    Retry,
    ToolError,
    parse_result,
)
from toolsafe.adapters.guard import ADAPTER_CONTRACT_VIOLATION, ADAPTER_EXCEPTION, call_adapter
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.recovery import reasons as R
from toolsafe.recovery.backoff import retry_delay
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.fingerprint import error_fingerprint
from toolsafe.recovery.outcomes import (
    Approved,
    Decision,
    Executed,
    InputCorrected,
    StepSnapshot,
    TransitionRefused,
)
from toolsafe.recovery.policy import Policy, RetryPolicy
from toolsafe.recovery.states import StepState

S = StepState

# ------------------------------------------------------------ unknown beats everything


@pytest.mark.parametrize(
    ("next_action", "category", "remaining"),
    list(itertools.product(["verify_operation", "escalate"], CATEGORIES, [0, 1, 5])),
)
def test_unknown_is_never_executed_again_before_verification(
    next_action: NextAction, category: Category, remaining: int
) -> None:
    envelope = error(
        category=category,
        commit_state="unknown",
        directive="never",
        next_action=next_action,
        remaining=remaining,
    )
    # Plenty of attempts left, and the loop guard one repeat from firing: neither matters.
    snapshot = step(
        attempts=1,
        fingerprint=error_fingerprint(envelope, INPUT_HASH),
        fingerprint_repeats=POLICY.loop_guard - 1,
    )
    decision = run(snapshot, Executed(envelope))
    assert decision.state is S.VERIFYING
    assert decision.action == "verify"
    assert decision.commit_state == "unknown"
    assert decision.fingerprint_repeats == POLICY.loop_guard  # still counted

    decision = run(replace(snapshot, traits=WRITE_NO_LOOKUP), Executed(envelope))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.UNVERIFIABLE_UNKNOWN


def test_unknown_write_never_goes_to_a_retry_even_if_the_envelope_offers_attempts() -> None:
    # The contract forbids `unknown` with `after_delay`; an adapter that bypasses the
    # validation still does not get a retry.
    broken = ToolError.model_construct(
        **{
            **unknown().model_dump(),
            "retry": Retry.model_construct(
                directive="after_delay", not_before=NOW, max_attempts_remaining=5
            ),
            "next_action": "wait_and_retry",
        }
    )
    decision = run(step(), Executed(broken))
    assert decision.state is S.VERIFYING


# ------------------------------------------------------------ attempts left = min(policy, envelope)


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "remaining", "limit"),
    [
        (1, 5, 10, 5),  # the envelope is more generous: the policy holds
        (1, 5, 1, 2),  # the envelope is stricter: it lowers the limit
        (2, 3, 3, 3),
        (4, 5, 1, 5),
    ],
)
def test_attempts_left_is_the_smaller_of_policy_and_envelope(
    attempts: int, max_attempts: int, remaining: int, limit: int
) -> None:
    snapshot = step(attempts=attempts, max_attempts=max_attempts)
    decision = run(snapshot, Executed(wait_and_retry(remaining=remaining)))
    assert decision.state is S.WAITING_RETRY
    assert decision.max_attempts == limit


def test_no_attempts_left_by_the_policy_escalates_whatever_the_envelope_says() -> None:
    decision = run(step(attempts=5, max_attempts=5), Executed(wait_and_retry(remaining=3)))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.ATTEMPTS_EXHAUSTED


def test_no_attempts_left_by_the_envelope_escalates_a_correctable_input() -> None:
    decision = run(step(), Executed(correct_input(remaining=0)))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.ATTEMPTS_EXHAUSTED
    assert decision.max_attempts == 1


# ------------------------------------------------------------ after_delay needs not_before


class _Input(BaseModel):
    amount: int


class _Adapter(Adapter[_Input]):
    tool: ClassVar[str] = "create_invoice"
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = _Input
    has_lookup: ClassVar[bool] = True

    def __init__(self, returns: object = None, raises: Exception | None = None) -> None:
        self.returns = returns
        self.raises = raises

    def execute(
        self, data: _Input, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        if self.raises is not None:
            raise self.raises
        return self.returns  # type: ignore[return-value]


class _ReadAdapter(_Adapter):
    writes: ClassVar[bool] = False
    has_lookup: ClassVar[bool] = False


class _WriteNoLookupAdapter(_Adapter):
    has_lookup: ClassVar[bool] = False


def _after_delay_without_not_before() -> ToolError:
    """What a buggy adapter builds by skipping validation."""
    return ToolError.model_construct(
        **{
            **wait_and_retry().model_dump(),
            "retry": Retry.model_construct(directive="after_delay", max_attempts_remaining=3),
        }
    )


def test_after_delay_without_not_before_breaks_the_contract() -> None:
    with pytest.raises(ValidationError, match="not_before is required"):
        Retry(directive="after_delay", max_attempts_remaining=1)
    wire = wait_and_retry().model_dump(mode="json")
    del wire["retry"]["not_before"]
    with pytest.raises(ValidationError, match="not_before is required"):
        parse_result(wire)


def test_after_delay_without_not_before_is_an_adapter_bug_and_a_write_verifies() -> None:
    adapter = _Adapter(returns=_after_delay_without_not_before())
    envelope = call_adapter(adapter, {"amount": 1}, REF)
    assert isinstance(envelope, ToolError)
    assert (envelope.code, envelope.category, envelope.commit_state) == (
        ADAPTER_CONTRACT_VIOLATION,
        "internal",
        "unknown",
    )
    decision = run(step(), Executed(envelope))
    assert decision.state is S.VERIFYING
    assert decision.commit_state == "unknown"


# ------------------------------------------------------------ not_before


def test_not_before_beyond_the_longest_wait_escalates() -> None:
    too_far = NOW + POLICY.retry.longest_wait + timedelta(seconds=1)
    decision = run(step(), Executed(wait_and_retry(too_far)))
    assert decision.state is S.ESCALATED
    assert decision.reason == R.NOT_BEFORE_TOO_FAR


def test_not_before_at_the_longest_wait_still_waits() -> None:
    at_limit = NOW + POLICY.retry.longest_wait
    decision = run(step(), Executed(wait_and_retry(at_limit)))
    assert decision.state is S.WAITING_RETRY
    assert decision.due_at == at_limit


def test_past_not_before_is_due_now_plus_only_the_runtimes_backoff() -> None:
    past = NOW - timedelta(hours=1)
    decision = run(step(attempts=2), Executed(wait_and_retry(past)), seed=21)
    assert decision.state is S.WAITING_RETRY
    assert decision.due_at == NOW + retry_delay(POLICY, 2, random.Random(21))
    no_backoff = Policy(retry=RetryPolicy(base_delay=timedelta(0), max_delay=timedelta(0)))
    decision = run(step(), Executed(wait_and_retry(past)), policy=no_backoff)
    assert decision.due_at == NOW


# ------------------------------------------------------------ loop guard


def _repeat(snapshot: StepSnapshot, envelope: ToolError, times: int) -> list[Decision]:
    """Feed the same error ``times`` times, carrying the fingerprint as the store would."""
    decisions = []
    for _ in range(times):
        decision = run(snapshot, Executed(envelope))
        decisions.append(decision)
        assert decision.fingerprint_repeats is not None
        snapshot = replace(
            snapshot,
            attempts=snapshot.attempts + 1,
            fingerprint=decision.fingerprint,
            fingerprint_repeats=decision.fingerprint_repeats,
        )
    return decisions


def test_loop_guard_escalates_after_k_identical_fingerprints() -> None:
    policy_k = POLICY.loop_guard
    snapshot = step(max_attempts=100)
    decisions = _repeat(snapshot, wait_and_retry(remaining=50), policy_k)
    assert [d.state for d in decisions[:-1]] == [S.WAITING_RETRY] * (policy_k - 1)
    assert [d.fingerprint_repeats for d in decisions] == list(range(1, policy_k + 1))
    assert decisions[-1].state is S.ESCALATED
    assert decisions[-1].reason == R.LOOP_GUARD
    assert len({d.fingerprint for d in decisions}) == 1


def test_loop_guard_counts_only_repeats_in_a_row() -> None:
    snapshot = step(
        max_attempts=100,
        fingerprint=error_fingerprint(wait_and_retry(), INPUT_HASH),
        fingerprint_repeats=POLICY.loop_guard - 1,
    )
    other = wait_and_retry(code="UPSTREAM_BUSY")
    decision = run(snapshot, Executed(other))
    assert decision.state is S.WAITING_RETRY
    assert decision.fingerprint_repeats == 1


def test_fingerprint_is_code_category_fields_and_input_hash_only() -> None:
    base = error_fingerprint(correct_input("a, b"), INPUT_HASH)
    assert base == error_fingerprint(correct_input("b,a"), INPUT_HASH)
    reworded = correct_input("a, b").model_copy(update={"agent_message": "other words"})
    assert base == error_fingerprint(reworded, INPUT_HASH)
    assert base != error_fingerprint(correct_input("a"), INPUT_HASH)
    assert base != error_fingerprint(correct_input("a, b"), input_hash({"x": 1}))
    assert base != error_fingerprint(correct_input("a, b", code="OTHER"), INPUT_HASH)
    assert base != error_fingerprint(correct_input("a, b", category="conflict"), INPUT_HASH)


# ------------------------------------------------------------ contract breaks


@pytest.mark.parametrize(
    ("adapter", "code"),
    [
        (_Adapter(raises=TimeoutError("socket read timed out")), ADAPTER_EXCEPTION),
        (_Adapter(returns={"ok": True}), ADAPTER_CONTRACT_VIOLATION),
        (_Adapter(returns=wait_and_retry(operation_ref="other/ref")), ADAPTER_CONTRACT_VIOLATION),
    ],
    ids=["raises", "not-an-envelope", "other-operation-ref"],
)
def test_contract_breaking_envelope_becomes_internal_and_unknown_for_a_write(
    adapter: _Adapter, code: str
) -> None:
    envelope = call_adapter(adapter, {"amount": 1}, REF)
    assert isinstance(envelope, ToolError)
    assert (envelope.code, envelope.category, envelope.commit_state) == (
        code,
        "internal",
        "unknown",
    )
    assert run(step(traits=WRITE), Executed(envelope)).state is S.VERIFYING
    escalated = run(step(traits=WRITE_NO_LOOKUP), Executed(envelope))
    assert (escalated.state, escalated.reason) == (S.ESCALATED, R.UNVERIFIABLE_UNKNOWN)


def test_contract_breaking_envelope_without_lookup_is_escalated_by_the_guard_too() -> None:
    envelope = call_adapter(_WriteNoLookupAdapter(returns=object()), {"amount": 1}, REF)
    assert isinstance(envelope, ToolError)
    assert envelope.next_action == "escalate"
    decision = run(step(traits=WRITE_NO_LOOKUP), Executed(envelope))
    assert (decision.state, decision.reason) == (S.ESCALATED, R.UNVERIFIABLE_UNKNOWN)


def test_contract_breaking_envelope_of_a_read_is_not_unknown() -> None:
    envelope = call_adapter(_ReadAdapter(returns=object()), {"amount": 1}, REF)
    assert isinstance(envelope, ToolError)
    assert envelope.commit_state == "not_committed"
    decision = run(step(traits=READ), Executed(envelope))
    assert (decision.state, decision.reason) == (S.ESCALATED, ADAPTER_CONTRACT_VIOLATION)
    assert decision.commit_state == "not_committed"


# ------------------------------------------------------------ reads retry dependency failures


@pytest.mark.parametrize("next_action", ["escalate", "verify_operation"])
def test_read_dependency_failure_retries_with_backoff(next_action: NextAction) -> None:
    envelope = error(category="dependency", next_action=next_action, remaining=0)
    decision = run(step(traits=READ, attempts=2), Executed(envelope), seed=4)
    assert decision.state is S.WAITING_RETRY
    assert decision.due_at == NOW + retry_delay(POLICY, 2, random.Random(4))
    assert decision.max_attempts == POLICY.retry.max_attempts


def test_read_dependency_failure_still_obeys_the_attempt_limit() -> None:
    envelope = error(category="dependency", next_action="escalate", remaining=0)
    decision = run(step(traits=READ, attempts=5), Executed(envelope))
    assert (decision.state, decision.reason) == (S.ESCALATED, R.ATTEMPTS_EXHAUSTED)


def test_write_dependency_failure_with_escalate_escalates() -> None:
    envelope = error(code="UPSTREAM_DOWN", category="dependency", next_action="escalate")
    decision = run(step(traits=WRITE), Executed(envelope))
    assert (decision.state, decision.reason) == (S.ESCALATED, "UPSTREAM_DOWN")


# ------------------------------------------------------------ corrected input, approvals

NEEDS_INPUT = step(S.NEEDS_INPUT, commit_state="not_committed", flagged_fields=("recipient_email",))


def test_identical_corrected_input_is_refused() -> None:
    outcome = InputCorrected(new_input_hash=input_hash(dict(INPUT)), changed_fields=frozenset())
    with pytest.raises(TransitionRefused) as refused:
        run(NEEDS_INPUT, outcome)
    assert refused.value.code == R.IDENTICAL_INPUT
    assert "recipient_email" in refused.value.message


def test_corrected_input_must_change_the_flagged_field() -> None:
    changed = {**INPUT, "amount": 99}
    outcome = InputCorrected(
        new_input_hash=input_hash(changed), changed_fields=frozenset({"amount"})
    )
    with pytest.raises(TransitionRefused) as refused:
        run(NEEDS_INPUT, outcome)
    assert refused.value.code == R.FLAGGED_FIELD_UNCHANGED
    assert "recipient_email" in refused.value.message


def test_corrected_input_that_fails_validation_is_refused() -> None:
    from toolsafe.adapters.protocol import FieldError

    changed = {**INPUT, "recipient_email": "still-bad"}
    outcome = InputCorrected(
        new_input_hash=input_hash(changed),
        changed_fields=frozenset({"recipient_email"}),
        field_errors=(FieldError("recipient_email", "INVALID_EMAIL"),),
    )
    with pytest.raises(TransitionRefused) as refused:
        run(NEEDS_INPUT, outcome)
    assert refused.value.code == R.CORRECTED_INPUT_INVALID
    assert "recipient_email" in refused.value.message


def test_accepted_corrected_input_keeps_the_operation_and_records_the_new_hash() -> None:
    changed = {**INPUT, "recipient_email": "ana@example.com"}
    outcome = InputCorrected(
        new_input_hash=input_hash(changed), changed_fields=frozenset({"recipient_email"})
    )
    decision = run(NEEDS_INPUT, outcome)
    assert decision.state is S.PENDING
    assert decision.input_hash == input_hash(changed)


def test_approval_for_another_input_is_refused() -> None:
    snapshot = step(S.AWAITING_APPROVAL, approval_input_hash=INPUT_HASH)
    other = input_hash({**INPUT, "amount": 10_000})
    with pytest.raises(TransitionRefused) as refused:
        run(snapshot, Approved(approver="ops", reason="fine", input_hash=other))
    assert refused.value.code == R.APPROVAL_INPUT_MISMATCH
    assert other in refused.value.message


def test_approval_without_a_recorded_request_hash_is_refused() -> None:
    snapshot = step(S.AWAITING_APPROVAL, approval_input_hash=None)
    with pytest.raises(TransitionRefused) as refused:
        run(snapshot, Approved(approver="ops", reason="fine", input_hash=INPUT_HASH))
    assert refused.value.code == R.APPROVAL_INPUT_MISMATCH


def test_policy_defaults_are_what_the_tables_assume() -> None:
    # The tables above rely on these; a changed default must fail loudly here.
    assert POLICY.retry.max_attempts == 5
    assert POLICY.loop_guard == 3
