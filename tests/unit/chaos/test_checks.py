"""The chaos run's step checks on hand-made steps: each check passes a step that keeps its
rule and catches the violation it is there for."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import AnySuccess, Verification, to_wire
from toolsafe.chaos.checks import StepFacts, check_steps, merged
from toolsafe.chaos.plan import Verdict, Violation
from toolsafe.recovery.records import EventRecord, StepRecord
from toolsafe.recovery.states import StepState

S = StepState
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
REF = "chaos/00001"


def _error(code: str, **options: Any) -> dict[str, Any]:
    return to_wire(codes.build_error(code, REF, {"tool": "create_invoice"}, **options))


SUCCESS = to_wire(
    AnySuccess(operation_ref=REF, result={"id": "inv_1"}, verification=Verification(checked_at=T0))
)
UNKNOWN = _error(codes.OUTCOME_UNKNOWN, commit_state="unknown", next_action="verify_operation")
NOT_FOUND = _error(codes.OPERATION_NOT_FOUND, not_before=T0, attempts_remaining=2)
CONFLICT = _error(codes.VERSION_CONFLICT, next_action="escalate", attempts_remaining=0)
EXHAUSTED = _error(codes.ATTEMPTS_EXHAUSTED, next_action="escalate", attempts_remaining=0)


def _step(state: StepState, commit_state: str | None, envelope: dict[str, Any] | None,
          **changes: Any) -> StepFacts:  # fmt: skip
    base = StepFacts(
        operation_ref=REF,
        state=state,
        commit_state=commit_state,
        attempts=1,
        max_attempts=3,
        policy_limit=3,
        executions=1,
        reason=None,
        envelope=envelope,
    )
    return replace(base, **changes)


GOOD = {
    "succeeded": _step(S.SUCCEEDED, "committed", SUCCESS),
    "verified": _step(S.SUCCEEDED, "committed", SUCCESS, attempts=1),
    "verifying": _step(S.VERIFYING, "unknown", UNKNOWN),
    "found_absent": _step(S.WAITING_RETRY, "not_committed", NOT_FOUND),
    "conflict": _step(S.ESCALATED, "not_committed", CONFLICT, reason=codes.VERSION_CONFLICT),
    "exhausted": _step(
        S.ESCALATED,
        "not_committed",
        EXHAUSTED,
        reason="ATTEMPTS_EXHAUSTED",
        attempts=3,
        executions=3,
    ),
    # The envelope lowered the step's limit below the policy's: that is allowed.
    "lowered_limit": _step(
        S.ESCALATED,
        "not_committed",
        EXHAUSTED,
        reason="ATTEMPTS_EXHAUSTED",
        attempts=2,
        executions=2,
        max_attempts=2,
    ),
    "pending": _step(S.PENDING, None, None, attempts=0, executions=0),
}

# name -> (a step that breaks one rule, the rule that must catch it)
BROKEN: dict[str, tuple[StepFacts, str]] = {
    "more attempts than the step allows": (
        replace(GOOD["exhausted"], attempts=4, executions=4),
        "attempts_over_limit",
    ),
    "a step limit above the policy's": (
        replace(GOOD["succeeded"], max_attempts=5),
        "attempts_over_limit",
    ),
    "an execution the count missed": (
        replace(GOOD["succeeded"], executions=2),
        "attempts_miscounted",
    ),
    "exhausted before the limit": (
        replace(GOOD["exhausted"], attempts=2, executions=2),
        "exhausted_below_limit",
    ),
    "escalated without an envelope": (replace(GOOD["conflict"], envelope=None), "envelope_missing"),
    "a success shown as an error": (
        replace(GOOD["succeeded"], envelope=CONFLICT),
        "success_envelope_wrong",
    ),
    "a success not committed": (
        replace(GOOD["succeeded"], envelope={**SUCCESS, "commit_state": "unknown"}),
        "success_envelope_wrong",
    ),
    "an escalation shown as a success": (
        replace(GOOD["conflict"], envelope=SUCCESS),
        "error_state_shows_success",
    ),
    "a failure shown as an unknown outcome": (
        _step(S.FAILED, "unknown", UNKNOWN, reason="REJECTED"),
        "failed_shows_unknown",
    ),
    "waiting to retry with no not_before": (
        _step(S.WAITING_RETRY, "not_committed", {**NOT_FOUND, "retry": {"directive": "never"}}),
        "retry_without_not_before",
    ),
    # The bug the check was written for: found absent, back to waiting_retry, and the
    # model still told that the outcome is unknown.
    "found absent, still shown unknown": (
        _step(S.WAITING_RETRY, "not_committed", {**UNKNOWN, "retry": NOT_FOUND["retry"]}),
        "stale_unknown_envelope",
    ),
    "an envelope with another commit_state": (
        replace(GOOD["conflict"], envelope={**CONFLICT, "commit_state": "committed"}),
        "envelope_disagrees",
    ),
}


def test_steps_that_keep_the_rules_pass() -> None:
    assert check_steps(list(GOOD.values())) == []


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_check_catches_its_violation(name: str) -> None:
    step, rule = BROKEN[name]
    around = [
        replace(GOOD[good], operation_ref=f"chaos/{good}") for good in ("verifying", "found_absent")
    ]
    found = check_steps([around[0], step, around[1]])
    # A broken step may break a neighbouring rule too; its own rule must be among them.
    assert rule in [violation.rule for violation in found], found
    assert {violation.operation_ref for violation in found} == {REF}
    assert all(violation.detail for violation in found)


def test_facts_are_read_from_the_store_s_records() -> None:
    step = StepRecord(
        id=1, operation_ref=REF, tool="create_invoice", input={}, input_hash="sha256:0",
        state=S.ESCALATED, commit_state="not_committed", attempts=2, max_attempts=2,
        verification_attempts=0, lookups_unavailable=0, due_at=None, lease_owner=None,
        lease_expires_at=None, last_sent_at=T0, last_envelope=EXHAUSTED, fingerprint=None,
        fingerprint_repeats=0, flagged_fields=(), approval_input_hash=None,
        reason="ATTEMPTS_EXHAUSTED", published_at=None, version=5, created_at=T0, updated_at=T0,
    )  # fmt: skip

    def event(kind: str, claim: str | None = None) -> EventRecord:
        detail = {"claim": claim} if claim else {}
        return EventRecord(1, REF, T0, kind, None, None, kind, detail)

    events = [event("submitted"), event("claimed", "execute"), event("executed"),
              event("claimed", "verify"), event("claimed", "execute")]  # fmt: skip
    facts = StepFacts.of(step, events, policy_limit=5)
    assert (facts.attempts, facts.executions, facts.max_attempts, facts.policy_limit) == (
        2, 2, 2, 5,
    )  # fmt: skip
    assert check_steps([facts]) == []
    assert [v.rule for v in check_steps([StepFacts.of(step, events[:2], 5)])] == [
        "attempts_miscounted"
    ]


def test_a_persons_decision_counts_the_policy_limit_from_then() -> None:
    """Approved after 1 execution, the step may hold 1 + the policy's limit (issue 29);
    one more than that is still a violation."""

    def event(kind: str, to: StepState | None = None, claim: str | None = None) -> EventRecord:
        detail = {"claim": claim} if claim else {}
        return EventRecord(1, REF, T0, kind, None, to, kind, detail)

    step = StepRecord(
        id=1, operation_ref=REF, tool="create_invoice", input={}, input_hash="sha256:0",
        state=S.SUCCEEDED, commit_state="committed", attempts=3, max_attempts=1 + 3,
        verification_attempts=0, lookups_unavailable=0, due_at=None, lease_owner=None,
        lease_expires_at=None, last_sent_at=T0, last_envelope=SUCCESS, fingerprint=None,
        fingerprint_repeats=0, flagged_fields=(), approval_input_hash="sha256:0",
        reason=None, published_at=None, version=9, created_at=T0, updated_at=T0,
    )  # fmt: skip
    events = [event("submitted"), event("claimed", claim="execute"),
              event("executed", S.AWAITING_APPROVAL), event("approved", S.PENDING),
              event("claimed", claim="execute"), event("executed", S.WAITING_RETRY),
              event("claimed", claim="execute"), event("executed", S.SUCCEEDED)]  # fmt: skip
    facts = StepFacts.of(step, events, policy_limit=3)
    assert facts.granted_at == 1
    assert check_steps([facts]) == []
    assert [v.rule for v in check_steps([replace(facts, max_attempts=5)])] == [
        "attempts_over_limit"
    ]
    # Without a person's decision in its history the same limit is over the policy's.
    plain = StepFacts.of(step, [events[0], events[1], events[4], events[6]], 3)
    assert [v.rule for v in check_steps([plain])] == ["attempts_over_limit"]


def test_merged_adds_to_a_verdict_and_counts_by_rule() -> None:
    first = Violation("a", "stuck", "still pending")
    verdict = merged(Verdict((first,), {"stuck": 1}), [Violation("b", "stuck", "x"),
                     Violation("b", "envelope_missing", "y")])  # fmt: skip
    assert [v.operation_ref for v in verdict.violations] == ["a", "b", "b"]
    assert verdict.by_rule == {"envelope_missing": 1, "stuck": 2}
