"""Builders shared by the decision-function tests: steps as stored, and
``toolsafe.testing.envelopes`` at the step's ref and the tests' fixed ``NOW``."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toolsafe.adapters.envelope import AnySuccess, NextAction, ToolError
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import Decision, Outcome, StepSnapshot
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.testing import envelopes

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


def error(*, operation_ref: str = REF, **fields: Any) -> ToolError:
    """``toolsafe.testing.envelopes.error`` for the step above (``REF``)."""
    said = {"code": "SOME_ERROR", "agent_message": "Something happened.",
            "user_message": "Something happened."}  # fmt: skip
    return envelopes.error(operation_ref, **{**said, **fields})


def unknown(next_action: NextAction = "verify_operation", **kw: Any) -> ToolError:
    return envelopes.unknown(kw.pop("operation_ref", REF), next_action=next_action, **kw)


def correct_input(fields: str = "recipient_email", remaining: int = 1, **kw: Any) -> ToolError:
    return envelopes.correct_input(kw.pop("operation_ref", REF), fields, remaining, **kw)


def wait_and_retry(not_before: datetime | None = None, remaining: int = 3, **kw: Any) -> ToolError:
    """A rate limit due a minute after ``NOW`` unless told otherwise."""
    due = not_before or NOW + timedelta(seconds=60)
    return envelopes.retry_later(kw.pop("operation_ref", REF), due, remaining, **kw)


def success(evidence_ref: str | None = "invoice/INV-1", operation_ref: str = REF) -> AnySuccess:
    return envelopes.success(
        operation_ref, evidence_ref, checked_at=NOW, result={"invoice_id": "INV-1"}
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
