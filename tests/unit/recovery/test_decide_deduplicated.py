"""Verification of a write whose downstream deduplicates by key (the adapter's
``deduplicates_by_key``), against the same write without it: when a lookup's "not found"
is final, what a "key in flight" answer changes, and what stays as it was."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.support.recovery.decide_factories import NOW, REF, run, step, wait_and_retry
from toolsafe.adapters import codes
from toolsafe.adapters.protocol import LookupFound, LookupNotFound
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import (
    Cancelled,
    Decision,
    Executed,
    LeaseExpired,
    LookedUp,
    StepSnapshot,
    TransitionRefused,
)
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.windows import not_found_final_at

S = StepState
WINDOW = timedelta(seconds=3)
LONGEST = timedelta(seconds=60)
PLAIN = ToolTraits(writes=True, has_lookup=True, consistency_window=WINDOW, longest_call=LONGEST)
DEDUPLICATED = replace(PLAIN, deduplicates_by_key=True)
SENT = NOW - timedelta(minutes=5)  # the killed attempt's claim
NOT_FOUND = LookedUp(LookupNotFound(checked_at=NOW))


def verifying(traits: ToolTraits, **changes: Any) -> StepSnapshot:
    """A step verifying the outcome of attempt 1, claimed at ``SENT`` (its worker died)."""
    shown = codes.build_error(codes.WORKER_LOST, REF, commit_state="unknown").model_dump(
        mode="json"
    )
    base = step(S.VERIFYING, traits=traits, commit_state="unknown", last_sent_at=SENT)
    return replace(base, envelope=shown, **changes)


def looked_up_at(snapshot: StepSnapshot, after_send: timedelta) -> Decision:
    return run(snapshot, NOT_FOUND, now=SENT + after_send)


def wire(decision: Decision) -> dict[str, Any]:
    assert decision.envelope is not None
    shown: dict[str, Any] = decision.envelope.model_dump(mode="json")
    return shown


# ------------------------------------------------------------------ when "not found" is final


def test_without_the_trait_not_found_waits_out_the_longest_call() -> None:
    decision = looked_up_at(verifying(PLAIN), WINDOW + timedelta(seconds=1))
    assert decision.state is S.VERIFYING and decision.action == "verify"
    assert decision.commit_state == "unknown"
    assert decision.due_at is not None and decision.due_at <= SENT + LONGEST + WINDOW
    final = looked_up_at(verifying(PLAIN), LONGEST + WINDOW)
    assert final.state is S.WAITING_RETRY and final.commit_state == "not_committed"


def test_with_the_trait_not_found_is_final_one_window_after_the_send() -> None:
    decision = looked_up_at(verifying(DEDUPLICATED), WINDOW)
    assert decision.state is S.WAITING_RETRY and decision.action == "run"
    assert decision.commit_state == "not_committed"
    assert decision.due_at == SENT + WINDOW  # retried at once, under the same operation_ref


def test_with_the_trait_not_found_inside_the_window_looks_again_by_its_end() -> None:
    decision = looked_up_at(verifying(DEDUPLICATED), WINDOW - timedelta(seconds=2))
    assert decision.state is S.VERIFYING and decision.action == "verify"
    assert decision.due_at is not None and decision.due_at <= SENT + WINDOW


def test_with_the_trait_found_still_succeeds() -> None:
    found = LookedUp(LookupFound(checked_at=NOW, result={"id": "inv_1"}, evidence_ref="inv_1"))
    decision = run(verifying(DEDUPLICATED), found, now=SENT + timedelta(seconds=1))
    assert decision.state is S.SUCCEEDED and decision.evidence_ref == "inv_1"


def test_with_the_trait_and_no_attempt_left_not_found_waits_out_the_longest_call() -> None:
    # No retry follows, so no key would deduplicate a late request: closing the step
    # "not written" waits until that request can no longer arrive.
    spent = verifying(DEDUPLICATED, attempts=5, max_attempts=5)
    early = looked_up_at(spent, WINDOW + timedelta(seconds=1))
    assert early.state is S.VERIFYING and early.commit_state == "unknown"
    final = looked_up_at(spent, LONGEST + WINDOW)
    assert final.state is S.ESCALATED and final.reason == R.ATTEMPTS_EXHAUSTED
    assert final.commit_state == "not_committed"


def test_without_a_send_time_not_found_is_final_with_or_without_the_trait() -> None:
    for traits in (PLAIN, DEDUPLICATED):
        assert not_found_final_at(verifying(traits, last_sent_at=None)) is None


# ------------------------------------------------------------------ the retry meets the old request


def key_in_flight() -> Executed:
    return Executed(codes.build_error(codes.IDEMPOTENCY_KEY_IN_FLIGHT, REF, {"status": 409}))


def test_a_key_in_flight_answer_is_verified_never_failed_or_resent() -> None:
    retry = step(S.IN_FLIGHT, traits=DEDUPLICATED, attempts=2, last_sent_at=SENT)
    decision = run(retry, key_in_flight(), now=SENT + timedelta(seconds=1))
    assert decision.state is S.VERIFYING and decision.action == "verify"
    assert decision.commit_state == "unknown"
    assert wire(decision)["code"] == codes.IDEMPOTENCY_KEY_IN_FLIGHT


def test_after_a_key_in_flight_answer_not_found_waits_out_the_longest_call() -> None:
    # The downstream said a request with the key is being processed: it may yet commit,
    # so its absence is final only once the longest call after the retry's send is over.
    retry = step(S.IN_FLIGHT, traits=DEDUPLICATED, attempts=2, last_sent_at=SENT)
    answered = run(retry, key_in_flight(), now=SENT + timedelta(seconds=1))
    waiting = replace(
        retry,
        state=S.VERIFYING,
        commit_state="unknown",
        envelope=wire(answered),
        fingerprint=answered.fingerprint,
        fingerprint_repeats=answered.fingerprint_repeats or 0,
    )
    early = looked_up_at(waiting, WINDOW + timedelta(seconds=1))
    assert early.state is S.VERIFYING and early.commit_state == "unknown"
    # The envelope the model sees still says why, so the next look applies the same rule.
    assert wire(early)["code"] == codes.IDEMPOTENCY_KEY_IN_FLIGHT
    final = looked_up_at(waiting, LONGEST + WINDOW)
    assert final.state is S.WAITING_RETRY and final.commit_state == "not_committed"


@pytest.mark.parametrize("traits", [PLAIN, DEDUPLICATED], ids=["plain", "deduplicated"])
def test_a_lost_worker_is_verified_first_with_or_without_the_trait(traits: ToolTraits) -> None:
    claimed = step(S.IN_FLIGHT, traits=traits, last_sent_at=SENT)
    decision = run(claimed, LeaseExpired(), now=SENT + timedelta(seconds=4))
    assert decision.state is S.VERIFYING and decision.commit_state == "unknown"


# ------------------------------------------------------------------ cancelling the retry


def found_absent(traits: ToolTraits) -> StepSnapshot:
    """Waiting to retry after the lookup at ``SENT + WINDOW`` found nothing (with the
    trait that is before the longest call is over)."""
    absent = looked_up_at(verifying(DEDUPLICATED), WINDOW)
    assert wire(absent)["code"] == codes.OPERATION_NOT_FOUND
    return replace(
        verifying(traits),
        state=S.WAITING_RETRY,
        commit_state="not_committed",
        envelope=wire(absent),
        due_at=absent.due_at,
    )


def test_a_retry_that_may_still_meet_the_old_request_cannot_be_cancelled() -> None:
    with pytest.raises(TransitionRefused) as refused:
        run(found_absent(DEDUPLICATED), Cancelled("agent", "gave up"), now=SENT + WINDOW)
    assert refused.value.code == R.UNKNOWN_NOT_CANCELLABLE


def test_the_retry_can_be_cancelled_once_the_old_request_cannot_arrive() -> None:
    later = SENT + LONGEST + WINDOW
    decision = run(found_absent(DEDUPLICATED), Cancelled("agent", "gave up"), now=later)
    assert decision.state is S.CANCELLED and decision.commit_state == "not_committed"


def test_without_the_trait_a_step_waiting_to_retry_cancels_as_before() -> None:
    decision = run(found_absent(PLAIN), Cancelled("agent", "gave up"), now=SENT + WINDOW)
    assert decision.state is S.CANCELLED


# ------------------------------------------------------------------ the retry refused, spent


def retried(traits: ToolTraits) -> StepSnapshot:
    """The last attempt, claimed right after the early "not found" (``found_absent``)."""
    waiting = found_absent(traits)
    claimed = SENT + WINDOW
    return replace(waiting, state=S.IN_FLIGHT, attempts=waiting.max_attempts, last_sent_at=claimed)


def rate_limited() -> Executed:
    """Refused before the downstream's key check: this attempt wrote nothing."""
    return Executed(wait_and_retry(not_before=SENT + WINDOW + timedelta(seconds=30)))


def test_a_spent_retry_after_an_early_absence_escalates_unknown_not_unwritten() -> None:
    # The killed attempt's request may still land (the retry's key never reached the
    # downstream's check): the step cannot end "not written" yet; an operator checks.
    decision = run(retried(DEDUPLICATED), rate_limited(), now=SENT + WINDOW + timedelta(seconds=1))
    assert decision.state is S.ESCALATED and decision.reason == R.ATTEMPTS_EXHAUSTED
    assert decision.commit_state == "unknown" and wire(decision)["commit_state"] == "unknown"


def test_a_spent_retry_escalates_unwritten_once_the_old_request_cannot_arrive() -> None:
    later = SENT + WINDOW + LONGEST + WINDOW
    decision = run(retried(DEDUPLICATED), rate_limited(), now=later)
    assert decision.state is S.ESCALATED and decision.commit_state == "not_committed"


def test_without_the_trait_a_spent_retry_escalates_unwritten_as_before() -> None:
    # Without the trait "not found" was final only after the longest call: nothing of the
    # earlier attempt can still arrive.
    decision = run(retried(PLAIN), rate_limited(), now=SENT + WINDOW + timedelta(seconds=1))
    assert decision.state is S.ESCALATED and decision.commit_state == "not_committed"
