"""The stable codes the runtime writes: why a step was escalated or failed, and why an
agent's or operator's action was refused. ``docs/lifecycle.md`` explains each one."""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------- escalations, failures

ATTEMPTS_EXHAUSTED: Final = "ATTEMPTS_EXHAUSTED"
LOOP_GUARD: Final = "LOOP_GUARD"
NOT_BEFORE_TOO_FAR: Final = "NOT_BEFORE_TOO_FAR"
UNVERIFIABLE_UNKNOWN: Final = "UNVERIFIABLE_UNKNOWN"
LOOKUP_UNAVAILABLE: Final = "LOOKUP_UNAVAILABLE"
NO_LOOKUP: Final = "NO_LOOKUP"
ADAPTER_CONTRACT_VIOLATION: Final = "ADAPTER_CONTRACT_VIOLATION"
REJECTED: Final = "REJECTED"
CANCELLED: Final = "CANCELLED"
OPERATOR_RESOLVED: Final = "OPERATOR_RESOLVED"

REASONS: Final[dict[str, str]] = {
    ATTEMPTS_EXHAUSTED: "no execution left: min(policy, the envelope's max_attempts_remaining)",
    LOOP_GUARD: "the same error fingerprint K times in a row (policy.loop_guard)",
    NOT_BEFORE_TOO_FAR: "the adapter's not_before is beyond policy.retry.longest_wait",
    UNVERIFIABLE_UNKNOWN: "a write's outcome is unknown and the tool has no lookup",
    LOOKUP_UNAVAILABLE: (
        "the lookup stayed unavailable for the verification budget "
        "(policy.verification.budget, at least max_unavailable lookups in a row)"
    ),
    NO_LOOKUP: "a verification was due but the tool has no lookup",
    ADAPTER_CONTRACT_VIOLATION: "a read returned an envelope for another operation_ref",
    REJECTED: "a human rejected the approval request (failed)",
    CANCELLED: "the agent service or an operator cancelled the step (cancelled)",
    OPERATOR_RESOLVED: "an operator closed the escalated step as succeeded or failed",
}
"""Reasons the runtime itself assigns. An ``escalate`` envelope escalates with its own
code instead (e.g. ``VERSION_CONFLICT``)."""

# ---------------------------------------------------------------- refusals

STALE_OUTCOME: Final = "STALE_OUTCOME"
NOT_NEEDS_INPUT: Final = "NOT_NEEDS_INPUT"
IDENTICAL_INPUT: Final = "IDENTICAL_INPUT"
FLAGGED_FIELD_UNCHANGED: Final = "FLAGGED_FIELD_UNCHANGED"
INVALID_INPUT: Final = "INVALID_INPUT"
NOT_AWAITING_APPROVAL: Final = "NOT_AWAITING_APPROVAL"
APPROVAL_INPUT_MISMATCH: Final = "APPROVAL_INPUT_MISMATCH"
NOT_CANCELLABLE: Final = "NOT_CANCELLABLE"
UNKNOWN_NOT_CANCELLABLE: Final = "UNKNOWN_NOT_CANCELLABLE"
NOT_ESCALATED: Final = "NOT_ESCALATED"
INVALID_RESOLUTION: Final = "INVALID_RESOLUTION"
REDRIVE_UNVERIFIABLE: Final = "REDRIVE_UNVERIFIABLE"

REFUSALS: Final[dict[str, str]] = {
    STALE_OUTCOME: "a worker's result arrived for a state it does not apply to (late or duplicate)",
    NOT_NEEDS_INPUT: "corrected input was sent for a step that is not in needs_input",
    IDENTICAL_INPUT: "the corrected input is identical to the input that failed",
    FLAGGED_FIELD_UNCHANGED: "a field the error flagged did not change",
    INVALID_INPUT: "the corrected input fails the adapter's validation",
    NOT_AWAITING_APPROVAL: "an approval or rejection for a step not in awaiting_approval",
    APPROVAL_INPUT_MISMATCH: "the approval was given for another input than the one requested",
    NOT_CANCELLABLE: "only a waiting step can be cancelled (not in_flight, not terminal)",
    UNKNOWN_NOT_CANCELLABLE: (
        "a write whose outcome is unknown is being verified; cancelling would hide a write "
        "that may have happened"
    ),
    NOT_ESCALATED: "operator resolution applies only to an escalated step",
    INVALID_RESOLUTION: "a resolution must go to pending, succeeded or failed",
    REDRIVE_UNVERIFIABLE: "a re-drive of an unknown outcome needs a lookup; resolve by hand",
}
