"""The codes of the envelopes the runtime writes itself, when a step's state is no longer
the one the adapter's envelope described (``toolsafe.recovery.envelopes``), and their
catalogue entries; ``codes.CATALOGUE`` holds them after the adapters' own codes, and
``codes`` names them too. Escalation and failure codes equal the reason codes of
``toolsafe.recovery.reasons``."""

from __future__ import annotations

from typing import Final

from toolsafe.adapters.code_spec import HANDED_OVER, WAIT, CodeSpec, spec

ATTEMPTS_EXHAUSTED: Final = "ATTEMPTS_EXHAUSTED"
LOOP_GUARD: Final = "LOOP_GUARD"
NOT_BEFORE_TOO_FAR: Final = "NOT_BEFORE_TOO_FAR"
UNVERIFIABLE_UNKNOWN: Final = "UNVERIFIABLE_UNKNOWN"
LOOKUP_UNAVAILABLE: Final = "LOOKUP_UNAVAILABLE"
NO_LOOKUP: Final = "NO_LOOKUP"
REJECTED: Final = "REJECTED"
CANCELLED: Final = "CANCELLED"
OPERATOR_RESOLVED: Final = "OPERATOR_RESOLVED"
OPERATION_NOT_FOUND: Final = "OPERATION_NOT_FOUND"
WORKER_LOST: Final = "WORKER_LOST"
SECRET_KEY_MISSING: Final = "SECRET_KEY_MISSING"  # noqa: S105 - a code, not a secret

RUNTIME_ENVELOPE_CODES: Final = frozenset(
    {
        ATTEMPTS_EXHAUSTED,
        LOOP_GUARD,
        NOT_BEFORE_TOO_FAR,
        UNVERIFIABLE_UNKNOWN,
        LOOKUP_UNAVAILABLE,
        NO_LOOKUP,
        REJECTED,
        CANCELLED,
        OPERATOR_RESOLVED,
        OPERATION_NOT_FOUND,
        WORKER_LOST,
        SECRET_KEY_MISSING,
    }
)
"""The envelopes the runtime writes itself. Those of an escalated or failed step carry
the step's reason as their code: one meaning, the reason, shown to the model."""

RUNTIME_SPECS: Final[tuple[CodeSpec, ...]] = (
    spec(
        ATTEMPTS_EXHAUSTED,
        "dependency",
        "not_committed",
        "never",
        "escalate",
        0,
        ("last_code", "tool"),
        "The call kept failing (last code {last_code}) and no attempt is left; nothing "
        "was written. " + HANDED_OVER,
        "The action could not be completed and was handed to an operator.",
        "The runtime's attempt limit (min(policy, max_attempts_remaining)) is spent.",
    ),
    spec(
        LOOP_GUARD,
        "dependency",
        "not_committed",
        "never",
        "escalate",
        0,
        ("last_code", "tool"),
        "The call failed the same way (code {last_code}) several times in a row; nothing "
        "was written. " + HANDED_OVER,
        "The action could not be completed and was handed to an operator.",
        "The same error fingerprint policy.loop_guard times in a row.",
    ),
    spec(
        NOT_BEFORE_TOO_FAR,
        "dependency",
        "not_committed",
        "never",
        "escalate",
        0,
        ("last_code", "tool"),
        "The downstream asked to wait longer than this tool may wait (code {last_code}); "
        "nothing was written. " + HANDED_OVER,
        "The action could not be completed and was handed to an operator.",
        "The adapter's not_before lies beyond policy.retry.longest_wait.",
    ),
    spec(
        UNVERIFIABLE_UNKNOWN,
        "dependency",
        "unknown",
        "never",
        "escalate",
        0,
        ("reason", "tool"),
        "The request may have reached the downstream ({reason}) and this tool cannot look "
        "it up, so whether it took effect is unknown. An operator will check it; do not "
        "retry it.",
        "We could not confirm whether the action took effect; an operator will check it.",
        "A write whose outcome is unknown, for a tool without a lookup.",
    ),
    spec(
        LOOKUP_UNAVAILABLE,
        "dependency",
        "unknown",
        "never",
        "escalate",
        0,
        ("lookups", "tool"),
        "Whether the request took effect is unknown, and the downstream's lookup stayed "
        "unavailable ({lookups} tries in a row). An operator will check it; do not retry it.",
        "We could not confirm whether the action took effect; an operator will check it.",
        "Verification gave up: the lookup was unavailable too often.",
    ),
    spec(
        NO_LOOKUP,
        "internal",
        "unknown",
        "never",
        "escalate",
        0,
        ("tool",),
        "Whether the request took effect is unknown and this tool has no lookup. An "
        "operator will check it; do not retry it.",
        "We could not confirm whether the action took effect; an operator will check it.",
        "A verification was due but the tool has no lookup.",
    ),
    spec(
        REJECTED,
        "authorization",
        "not_committed",
        "never",
        "escalate",
        0,
        ("approver", "tool"),
        "A human ({approver}) rejected the approval request; nothing was written. The "
        "step will not run; do not retry it, make a new plan.",
        "The action was rejected and will not run.",
        "A human rejected the approval request; the step failed.",
    ),
    spec(
        CANCELLED,
        "internal",
        "not_committed",
        "never",
        "escalate",
        0,
        ("by", "tool"),
        "The step was cancelled (by {by}) before it wrote anything. It will not run; do not "
        "retry it.",
        "The action was cancelled and will not run.",
        "The agent service or an operator cancelled the step.",
    ),
    spec(
        OPERATOR_RESOLVED,
        "internal",
        "not_committed",
        "never",
        "escalate",
        0,
        ("operator", "tool"),
        "An operator ({operator}) closed this step as failed. It will not run again; do "
        "not retry it, make a new plan.",
        "The action was closed as failed by an operator.",
        "An operator closed the escalated step as failed, stating that nothing was written.",
    ),
    spec(
        OPERATION_NOT_FOUND,
        "dependency",
        "not_committed",
        "after_delay",
        "wait_and_retry",
        3,
        ("tool",),
        "Verification found no trace of the earlier request after the downstream's "
        "consistency window: it did not take effect. The scheduler sends it again under "
        "the same operation_ref after not_before; do not retry it yourself.",
        "The action did not take effect yet; we will retry automatically.",
        "A lookup after the consistency window did not find the write: a retry is safe.",
    ),
    spec(
        WORKER_LOST,
        "internal",
        "not_committed",
        "after_delay",
        "wait_and_retry",
        3,
        ("tool",),
        "The worker running this read stopped before it answered; a read changes nothing. " + WAIT,
        "The action was interrupted; we will retry automatically.",
        "A read's worker vanished (lease expired); the read runs again.",
    ),
    spec(
        SECRET_KEY_MISSING,
        "internal",
        "not_committed",
        "never",
        "escalate",
        0,
        ("tool",),
        "The call's secret input could not be decrypted; nothing was sent. An operator will look.",
        "The action could not be started and was handed to an operator.",
        "The worker's TOOLSAFE_SECRET_KEYS cannot open the step's sealed input.",
    ),
)
"""The runtime's codes' catalogue entries, in the order the reference lists them."""
