"""Builders shared by the decision-function tests: steps as stored, envelopes, lookups."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toolsafe.adapters.envelope import (
    AnySuccess,
    Category,
    CommitState,
    Directive,
    NextAction,
    Retry,
    ToolError,
    ToolSuccess,
    Verification,
)
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import Decision, Outcome, StepSnapshot
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.states import StepState

NOW = datetime(2026, 11, 30, 9, 15, 0, tzinfo=UTC)
REF = "run_81/step_4"
INPUT = {"recipient_email": "ana@example", "amount": 120}
INPUT_HASH = input_hash(INPUT)

WRITE = ToolTraits(writes=True, has_lookup=True, consistency_window=timedelta(seconds=30))
WRITE_NO_LOOKUP = ToolTraits(writes=True, has_lookup=False)
READ = ToolTraits(writes=False, has_lookup=False)

POLICY = Policy()


def step(state: StepState = StepState.IN_FLIGHT, **changes: Any) -> StepSnapshot:
    """A write step with a lookup, claimed once, one second ago, unless told otherwise."""
    base = StepSnapshot(
        operation_ref=REF,
        tool="create_invoice",
        traits=WRITE,
        state=state,
        commit_state=None,
        attempts=1,
        max_attempts=POLICY.retry.max_attempts,
        verification_attempts=0,
        lookups_unavailable=0,
        input_hash=INPUT_HASH,
        last_sent_at=NOW - timedelta(seconds=1),
        fingerprint=None,
        fingerprint_repeats=0,
    )
    return replace(base, **changes)


def error(
    *,
    code: str = "SOME_ERROR",
    category: Category = "validation",
    commit_state: CommitState = "not_committed",
    directive: Directive = "never",
    next_action: NextAction = "escalate",
    remaining: int = 3,
    not_before: datetime | None = None,
    details: dict[str, str | int | float | bool] | None = None,
    operation_ref: str = REF,
) -> ToolError:
    return ToolError(
        code=code,
        category=category,
        commit_state=commit_state,
        retry=Retry(directive=directive, not_before=not_before, max_attempts_remaining=remaining),
        next_action=next_action,
        operation_ref=operation_ref,
        safe_details=details or {},
        agent_message="Something happened.",
        user_message="Something happened.",
    )


def unknown(next_action: NextAction = "verify_operation", **kw: Any) -> ToolError:
    fields: dict[str, Any] = {
        "code": "OUTCOME_UNKNOWN",
        "category": "dependency",
        "commit_state": "unknown",
        "directive": "never",
        "next_action": next_action,
        "remaining": 0,
    }
    return error(**{**fields, **kw})


def correct_input(fields: str = "recipient_email", remaining: int = 1, **kw: Any) -> ToolError:
    defaults: dict[str, Any] = {
        "code": "INVALID_RECIPIENT_ADDRESS",
        "directive": "after_input_fix",
        "next_action": "correct_input",
        "remaining": remaining,
        "details": {"fields": fields},
    }
    return error(**{**defaults, **kw})


def wait_and_retry(not_before: datetime | None = None, remaining: int = 3, **kw: Any) -> ToolError:
    defaults: dict[str, Any] = {
        "code": "RATE_LIMITED",
        "category": "dependency",
        "directive": "after_delay",
        "next_action": "wait_and_retry",
        "not_before": not_before or NOW + timedelta(seconds=60),
        "remaining": remaining,
    }
    return error(**{**defaults, **kw})


def success(evidence_ref: str | None = "invoice/INV-1", operation_ref: str = REF) -> AnySuccess:
    return ToolSuccess[Any](
        operation_ref=operation_ref,
        result={"invoice_id": "INV-1"},
        verification=Verification(checked_at=NOW, evidence_ref=evidence_ref),
    )


def run(
    snapshot: StepSnapshot,
    outcome: Outcome,
    *,
    now: datetime = NOW,
    policy: Policy = POLICY,
    seed: int = 7,
) -> Decision:
    return decide(snapshot, outcome, now, policy, random.Random(seed))
