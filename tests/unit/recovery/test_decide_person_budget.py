"""A person's decision is not spent by a transient fault (issue 29): an approval, or a
corrected input accepted, gives the step the tool's whole budget of executions again,
counted from then; the loop guard and the refusal of identical input stay as they were.

Pure: ``decide`` and ``plan`` on snapshots and records, the store's writes replayed by
hand (no I/O)."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

import pytest

from tests.support.recovery.decide_factories import (
    INPUT,
    INPUT_HASH,
    NOW,
    POLICY,
    correct_input,
    run,
    step,
    wait_and_retry,
)
from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.protocol import LookupNotFound
from toolsafe.recovery import reasons as R
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.outcomes import (
    Approved,
    Decision,
    Executed,
    InputCorrected,
    LeaseExpired,
    LookedUp,
    Outcome,
    Resolved,
    StepSnapshot,
    TransitionRefused,
)
from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import plan
from toolsafe.testing import envelopes

S = StepState
BUDGET = POLICY.retry.max_attempts
CORRECTED = {**INPUT, "recipient_email": "ana@example.com"}
APPROVE = Approved(approver="alice", reason="customer confirmed", input_hash=INPUT_HASH)
CORRECT = InputCorrected(input_hash(CORRECTED), frozenset({"recipient_email"}))
_COLUMNS = (
    "max_attempts",
    "verification_attempts",
    "lookups_unavailable",
    "fingerprint",
    "fingerprint_repeats",
    "input_hash",
    "approval_input_hash",
)


def written(before: StepSnapshot, decision: Decision) -> StepSnapshot:
    """The step as a store writes ``decision`` (its None counters mean unchanged)."""
    changes: dict[str, Any] = {
        "state": decision.state,
        "commit_state": decision.commit_state,
        "due_at": decision.due_at,
        "flagged_fields": decision.fields,
        "envelope": None if decision.envelope is None else decision.envelope.model_dump(),
    }
    changes.update(
        {name: getattr(decision, name) for name in _COLUMNS if getattr(decision, name) is not None}
    )
    return replace(before, **changes)


def through(snapshot: StepSnapshot, outcome: Outcome, **kw: Any) -> StepSnapshot:
    return written(snapshot, run(snapshot, outcome, **kw))


def claimed(snapshot: StepSnapshot) -> StepSnapshot:
    """The store's claim: one more execution, sent now."""
    assert snapshot.state in (S.PENDING, S.WAITING_RETRY)
    assert snapshot.attempts < snapshot.max_attempts, "the claim would be refused"
    return replace(snapshot, state=S.IN_FLIGHT, attempts=snapshot.attempts + 1, last_sent_at=NOW)


def shown_left(decision: Decision) -> int:
    assert isinstance(decision.envelope, ToolError)
    return decision.envelope.retry.max_attempts_remaining


def rate_limit() -> Executed:
    # The adapter is generous: the runtime's own count decides.
    return Executed(wait_and_retry(remaining=10))


def awaiting_approval() -> StepSnapshot:
    return through(step(), Executed(envelopes.needs_approval("run_81/step_4")))


def needs_input() -> StepSnapshot:
    return through(step(), Executed(correct_input()))


# ------------------------------------------------------------ what the waiting step says


@pytest.mark.parametrize("waiting", [awaiting_approval, needs_input])
def test_the_waiting_step_and_its_envelope_announce_the_whole_budget(waiting: Any) -> None:
    """The adapter said 1 attempt left; once the person acts the step gets the tool's
    budget, and the envelope and the row say so while it waits."""
    snapshot = waiting()
    assert snapshot.state in (S.AWAITING_APPROVAL, S.NEEDS_INPUT)
    assert snapshot.max_attempts == 1 + BUDGET  # the 1 claimed + the budget to come
    assert snapshot.envelope is not None
    assert snapshot.envelope["retry"]["max_attempts_remaining"] == BUDGET
    assert snapshot.max_attempts - snapshot.attempts == BUDGET  # the view agrees


def test_a_correction_with_no_call_allowed_still_escalates() -> None:
    decision = run(step(), Executed(correct_input(remaining=0)))
    assert (decision.state, decision.reason) == (S.ESCALATED, R.ATTEMPTS_EXHAUSTED)


def test_a_request_for_approval_with_the_budget_spent_still_escalates() -> None:
    spent = step(attempts=BUDGET, max_attempts=BUDGET)
    decision = run(spent, Executed(envelopes.needs_approval("run_81/step_4")))
    assert (decision.state, decision.reason) == (S.ESCALATED, R.ATTEMPTS_EXHAUSTED)


# ------------------------------------------------------------ approval, then a transient fault


def test_approve_then_rate_limit_waits_to_retry_with_the_tools_budget() -> None:
    pending = through(awaiting_approval(), APPROVE)
    assert pending.state is S.PENDING and pending.max_attempts == 1 + BUDGET
    running = claimed(pending)
    decision = run(running, rate_limit())
    assert decision.state is S.WAITING_RETRY, decision.reason
    # The approved call was the first of the budget the approval gave.
    assert decision.max_attempts == 1 + BUDGET
    assert shown_left(decision) == BUDGET - 1


def test_an_approval_stored_with_the_old_lowered_limit_gets_the_budget_too() -> None:
    """A step that waited for approval before this rule (its limit lowered to 2 by the
    adapter's "1 attempt left") is approved after the upgrade."""
    old = step(S.AWAITING_APPROVAL, max_attempts=2, approval_input_hash=INPUT_HASH)
    decision = run(old, APPROVE)
    assert decision.state is S.PENDING and decision.max_attempts == 1 + BUDGET
    again = claimed(written(old, decision))
    assert run(again, rate_limit()).state is S.WAITING_RETRY  # was ATTEMPTS_EXHAUSTED


def test_the_budget_after_approval_is_the_policys_and_then_runs_out() -> None:
    """Transient faults after an approval are retried as any step's are, up to the
    policy's max_attempts counted from the approval, and no further."""
    snapshot = claimed(through(awaiting_approval(), APPROVE))
    # Alternate a rate limit and an unavailable dependency: the fingerprint changes
    # every time, so only the attempt limit can stop it.
    unavailable = Executed(wait_and_retry(remaining=10, code="DEPENDENCY_UNAVAILABLE"))
    executions = 1
    while True:
        decision = run(snapshot, rate_limit() if executions % 2 else unavailable)
        if decision.state is not S.WAITING_RETRY:
            break
        snapshot = claimed(written(snapshot, decision))
        executions += 1
    assert (decision.state, decision.reason) == (S.ESCALATED, R.ATTEMPTS_EXHAUSTED)
    assert executions == BUDGET


# ------------------------------------------------------------ corrected input, then a crash


def test_corrected_input_then_a_crash_verified_absent_waits_to_retry() -> None:
    waiting = needs_input()
    pending = through(waiting, CORRECT)
    assert pending.state is S.PENDING and pending.max_attempts == 1 + BUDGET
    assert pending.input_hash == input_hash(CORRECTED)
    # The corrected call's worker is SIGKILLed: its lease expires, the write is unknown.
    verifying = through(claimed(pending), LeaseExpired())
    assert (verifying.state, verifying.commit_state) == (S.VERIFYING, "unknown")
    # Not found after the consistency window: nothing was written.
    decision = run(verifying, LookedUp(LookupNotFound(checked_at=NOW)), now=NOW + timedelta(0, 60))
    assert decision.state is S.WAITING_RETRY, decision.reason
    assert decision.commit_state == "not_committed"
    assert shown_left(decision) == BUDGET - 1


def test_corrected_input_then_an_unknown_answer_verified_absent_waits_to_retry() -> None:
    pending = through(needs_input(), CORRECT)
    verifying = through(claimed(pending), Executed(envelopes.unknown("run_81/step_4")))
    assert verifying.state is S.VERIFYING
    later = NOW + timedelta(minutes=1)
    decision = run(verifying, LookedUp(LookupNotFound(checked_at=later)), now=later)
    assert decision.state is S.WAITING_RETRY and decision.max_attempts is None  # unchanged
    assert verifying.max_attempts - verifying.attempts == BUDGET - 1


# ------------------------------------------------------------ what stays as it was


def test_the_loop_guard_still_escalates_repeated_refusals_across_approvals() -> None:
    """The downstream refuses the approved call with the same error every time: the
    approvals do not reset the loop guard, which escalates at its K-th repeat."""
    refusal = Executed(envelopes.needs_approval("run_81/step_4"))
    snapshot = through(step(), refusal)
    for repeat in range(2, POLICY.loop_guard + 1):
        decision = run(snapshot, APPROVE)
        assert decision.fingerprint_repeats is None  # an approval leaves the count alone
        snapshot = claimed(written(snapshot, decision))
        decision = run(snapshot, refusal)
        assert decision.fingerprint_repeats == repeat
        snapshot = written(snapshot, decision)
    assert (snapshot.state, decision.reason) == (S.ESCALATED, R.LOOP_GUARD)


def test_the_loop_guard_still_escalates_repeated_rate_limits_after_approval() -> None:
    snapshot = claimed(through(awaiting_approval(), APPROVE))
    for _ in range(POLICY.loop_guard - 1):
        decision = run(snapshot, rate_limit())
        assert decision.state is S.WAITING_RETRY
        snapshot = claimed(written(snapshot, decision))
    decision = run(snapshot, rate_limit())
    assert (decision.state, decision.reason) == (S.ESCALATED, R.LOOP_GUARD)


def test_identical_input_is_still_refused() -> None:
    waiting = needs_input()
    with pytest.raises(TransitionRefused) as refused:
        run(waiting, InputCorrected(INPUT_HASH, frozenset()))
    assert refused.value.code == R.IDENTICAL_INPUT


def test_the_corrected_input_sent_again_is_refused_as_identical() -> None:
    """Corrected once, refused again by the downstream: the same corrected input is the
    input that failed now."""
    again = through(claimed(through(needs_input(), CORRECT)), Executed(correct_input()))
    assert again.state is S.NEEDS_INPUT
    with pytest.raises(TransitionRefused) as refused:
        run(again, CORRECT)
    assert refused.value.code == R.IDENTICAL_INPUT


def test_an_operator_redrive_still_resets_the_loop_guard_and_an_approval_does_not() -> None:
    escalated = step(S.ESCALATED, commit_state="not_committed", attempts=3, fingerprint_repeats=2)
    redrive = run(escalated, Resolved(operator="op", reason="fixed", to=S.PENDING))
    approval = run(
        replace(escalated, state=S.AWAITING_APPROVAL, approval_input_hash=INPUT_HASH), APPROVE
    )
    # One mechanism, the same budget: attempts so far + the policy's max_attempts.
    assert redrive.max_attempts == approval.max_attempts == 3 + BUDGET
    assert redrive.fingerprint_repeats == 0 and approval.fingerprint_repeats is None


# ------------------------------------------------------------ the plan every backend writes


def _record(snapshot: StepSnapshot) -> StepRecord:
    columns = {f.name for f in fields(StepRecord)}
    values: dict[str, Any] = {
        name: getattr(snapshot, name) for name in columns if hasattr(snapshot, name)
    }
    values.update(
        id=1,
        input=dict(INPUT),
        last_envelope=snapshot.envelope,
        lease_owner=None,
        lease_expires_at=None,
        reason=None,
        published_at=NOW,
        version=3,
        created_at=NOW,
        updated_at=NOW,
    )
    return StepRecord(**values)


def test_the_approval_plan_writes_the_budget_and_records_it() -> None:
    record = _record(awaiting_approval())
    planned = plan.acted(
        record,
        APPROVE,
        kind="approved",
        detail={"approver": "alice"},
        traits=step().traits,
        policy=POLICY,
        now=NOW,
        rng=random.Random(1),
    )
    assert planned.values["state"] == S.PENDING.value
    assert planned.values["max_attempts"] == 1 + BUDGET
    assert planned.change.detail["max_attempts"] == 1 + BUDGET  # the event says so


def test_the_correction_plan_writes_the_budget_and_the_new_input() -> None:
    record = _record(needs_input())
    planned = plan.acted(
        record,
        CORRECT,
        kind="input_provided",
        detail={},
        traits=step().traits,
        policy=POLICY,
        now=NOW,
        rng=random.Random(1),
        extra={"input": CORRECTED},
    )
    assert planned.values["max_attempts"] == 1 + BUDGET
    assert planned.values["input_hash"] == input_hash(CORRECTED)
    assert planned.values["input"] == CORRECTED
