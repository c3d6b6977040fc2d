"""The stable codes the runtime writes: why a step was escalated or failed, why an
agent's or operator's action was refused, and why a claim did nothing (a ``noop``).

Each catalogue maps a code to its one-line meaning; ``docs/lifecycle.md`` and the
generated ``docs/envelope-reference.md`` explain them. A code means one thing: none of
these strings is also an envelope or lookup code (``toolsafe.adapters.codes``)."""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------- escalations, failures

ATTEMPTS_EXHAUSTED: Final = "ATTEMPTS_EXHAUSTED"
LOOP_GUARD: Final = "LOOP_GUARD"
NOT_BEFORE_TOO_FAR: Final = "NOT_BEFORE_TOO_FAR"
UNVERIFIABLE_UNKNOWN: Final = "UNVERIFIABLE_UNKNOWN"
LOOKUP_UNAVAILABLE: Final = "LOOKUP_UNAVAILABLE"
NO_LOOKUP: Final = "NO_LOOKUP"
OPERATION_REF_MISMATCH: Final = "OPERATION_REF_MISMATCH"
REJECTED: Final = "REJECTED"
CANCELLED: Final = "CANCELLED"
OPERATOR_RESOLVED: Final = "OPERATOR_RESOLVED"
UNSPECIFIED: Final = "UNSPECIFIED"

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
    OPERATION_REF_MISMATCH: "a read returned an envelope for another operation_ref",
    REJECTED: "a human rejected the approval request (failed)",
    CANCELLED: "the agent service or an operator cancelled the step (cancelled)",
    OPERATOR_RESOLVED: "an operator closed the escalated step as succeeded or failed",
    UNSPECIFIED: "what the counts show for an escalated step with no reason recorded",
}
"""Reasons the runtime itself assigns. An ``escalate`` envelope escalates with its own
code instead (e.g. ``VERSION_CONFLICT``)."""

# ---------------------------------------------------------------- refusals

STALE_OUTCOME: Final = "STALE_OUTCOME"
NOT_NEEDS_INPUT: Final = "NOT_NEEDS_INPUT"
IDENTICAL_INPUT: Final = "IDENTICAL_INPUT"
FLAGGED_FIELD_UNCHANGED: Final = "FLAGGED_FIELD_UNCHANGED"
CORRECTED_INPUT_INVALID: Final = "CORRECTED_INPUT_INVALID"
NOT_AWAITING_APPROVAL: Final = "NOT_AWAITING_APPROVAL"
APPROVAL_INPUT_MISMATCH: Final = "APPROVAL_INPUT_MISMATCH"
NOT_CANCELLABLE: Final = "NOT_CANCELLABLE"
UNKNOWN_NOT_CANCELLABLE: Final = "UNKNOWN_NOT_CANCELLABLE"
NOT_ESCALATED: Final = "NOT_ESCALATED"
INVALID_RESOLUTION: Final = "INVALID_RESOLUTION"
REDRIVE_UNVERIFIABLE: Final = "REDRIVE_UNVERIFIABLE"
REASON_REQUIRED: Final = "REASON_REQUIRED"
EVIDENCE_REQUIRED: Final = "EVIDENCE_REQUIRED"
EVIDENCE_INVALID: Final = "EVIDENCE_INVALID"
NOT_WRITTEN_UNCONFIRMED: Final = "NOT_WRITTEN_UNCONFIRMED"
CONCURRENT_CHANGE: Final = "CONCURRENT_CHANGE"

REFUSALS: Final[dict[str, str]] = {
    STALE_OUTCOME: "a worker's result arrived for a state it does not apply to (late or duplicate)",
    NOT_NEEDS_INPUT: "corrected input was sent for a step that is not in needs_input",
    IDENTICAL_INPUT: "the corrected input is identical to the input that failed",
    FLAGGED_FIELD_UNCHANGED: "a field the error flagged did not change",
    CORRECTED_INPUT_INVALID: "the corrected input fails the adapter's validation",
    NOT_AWAITING_APPROVAL: "an approval or rejection for a step not in awaiting_approval",
    APPROVAL_INPUT_MISMATCH: "the approval was given for another input than the one requested",
    NOT_CANCELLABLE: "only a waiting step can be cancelled (not in_flight, not terminal)",
    UNKNOWN_NOT_CANCELLABLE: (
        "a write whose outcome is unknown is being verified; cancelling would hide a write "
        "that may have happened"
    ),
    NOT_ESCALATED: "operator resolution applies only to an escalated step",
    INVALID_RESOLUTION: (
        "a resolution must go to succeeded or failed (resolve) or back to pending (redrive)"
    ),
    REDRIVE_UNVERIFIABLE: "a re-drive of an unknown outcome needs a lookup; resolve by hand",
    REASON_REQUIRED: "an operator resolution or re-drive was given no reason",
    EVIDENCE_REQUIRED: (
        "a resolution to succeeded needs evidence: a reference to the effect downstream"
    ),
    EVIDENCE_INVALID: (
        "the evidence is over 200 characters long, or holds characters, a secret "
        "or instructions a reference does not"
    ),
    NOT_WRITTEN_UNCONFIRMED: (
        "a resolution to failed of a write that may have happened needs confirm_not_written"
    ),
    CONCURRENT_CHANGE: "the step changed between reading it and writing the action; read it again",
}
"""The ``code`` of ``TransitionRefused``: the action was refused and nothing was written."""

MAX_EVIDENCE: Final = 200
"""The longest evidence an operator's resolution may carry (a downstream reference)."""

# ---------------------------------------------------------------- no-op reasons

NOOP_NOT_DUE: Final = "not_due"
NOOP_CLAIMED: Final = "claimed"
NOOP_UNKNOWN_OUTCOME: Final = "unknown_outcome"
NOOP_TERMINAL: Final = "terminal"
NOOP_WAITING_ON_HUMAN: Final = "waiting_on_human"
NOOP_ATTEMPTS_SPENT: Final = "attempts_spent"
NOOP_MISSING: Final = "missing"

NOOP_REASONS: Final[dict[str, str]] = {
    NOOP_NOT_DUE: "due_at is not set or in the future (an early ETA, R6)",
    NOOP_CLAIMED: "another worker holds it (in_flight, or a live verification lease)",
    NOOP_UNKNOWN_OUTCOME: (
        "the outcome is unknown (verifying, or commit_state unknown): verification first"
    ),
    NOOP_TERMINAL: "succeeded, failed, escalated or cancelled",
    NOOP_WAITING_ON_HUMAN: "needs_input or awaiting_approval",
    NOOP_ATTEMPTS_SPENT: "attempts >= max_attempts",
    NOOP_MISSING: "no step with that operation_ref",
}
"""Why a claim did nothing: the ``reason`` of a ``noop`` event (lower case, like the
event kinds it sits beside)."""

REFUSED_NOOPS: Final = (NOOP_UNKNOWN_OUTCOME, NOOP_CLAIMED, NOOP_TERMINAL)
"""The no-op reasons of an execution claim that would have written again: counted as
duplicate writes prevented (``docs/counts.md``); the rest are idle redeliveries."""
