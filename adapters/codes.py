"""The catalogue of the envelope's error codes: what each means, the detail keys it may
carry, the templates its messages are built from (the only source of message text), and
``build_error``. The lookup codes of an unavailable lookup are in ``lookup_codes``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from toolsafe.adapters.code_spec import FIX, WAIT, CodeSpec, spec
from toolsafe.adapters.envelope import (
    Category,
    CommitState,
    NextAction,
    Retry,
    ToolError,
)
from toolsafe.adapters.redaction import safe_details_for
from toolsafe.adapters.runtime_codes import (
    ATTEMPTS_EXHAUSTED,
    CANCELLED,
    LOOKUP_UNAVAILABLE,
    LOOP_GUARD,
    NO_LOOKUP,
    NOT_BEFORE_TOO_FAR,
    OPERATION_NOT_FOUND,
    OPERATOR_RESOLVED,
    REJECTED,
    RUNTIME_ENVELOPE_CODES,
    RUNTIME_SPECS,
    SECRET_KEY_MISSING,
    UNVERIFIABLE_UNKNOWN,
    WORKER_LOST,
)

# Every code has its name here, the runtime's own (``runtime_codes``) included, so
# ``codes.X`` stays the one place to look.
__all__ = [
    "ADAPTER_CONTRACT_VIOLATION",
    "ADAPTER_EXCEPTION",
    "ATTEMPTS_EXHAUSTED",
    "CANCELLED",
    "CATALOGUE",
    "CLIENT_REQUEST_INVALID",
    "CONFLICT",
    "DEPENDENCY_UNAVAILABLE",
    "IDEMPOTENCY_KEY_IN_FLIGHT",
    "IDEMPOTENCY_KEY_REUSED",
    "INVALID_INPUT",
    "INVALID_RECIPIENT_ADDRESS",
    "LOOKUP_UNAVAILABLE",
    "LOOP_GUARD",
    "MISSING_APPROVAL",
    "NOT_AUTHORIZED",
    "NOT_BEFORE_TOO_FAR",
    "NO_LOOKUP",
    "OPERATION_NOT_FOUND",
    "OPERATOR_RESOLVED",
    "OUTCOME_UNKNOWN",
    "RATE_LIMITED",
    "REJECTED",
    "REQUEST_REJECTED",
    "RUNTIME_ENVELOPE_CODES",
    "SECRET_KEY_MISSING",
    "UNKNOWN_TOOL",
    "UNREADABLE_RESPONSE",
    "UNVERIFIABLE_UNKNOWN",
    "UPSTREAM_ERROR",
    "UPSTREAM_VALIDATION_FAILED",
    "VERSION_CONFLICT",
    "WORKER_LOST",
    "CodeSpec",
    "build_error",
    "render",
    "spec_for",
]

OUTCOME_UNKNOWN: Final = "OUTCOME_UNKNOWN"
UPSTREAM_ERROR: Final = "UPSTREAM_ERROR"
DEPENDENCY_UNAVAILABLE: Final = "DEPENDENCY_UNAVAILABLE"
RATE_LIMITED: Final = "RATE_LIMITED"
INVALID_INPUT: Final = "INVALID_INPUT"
INVALID_RECIPIENT_ADDRESS: Final = "INVALID_RECIPIENT_ADDRESS"
VERSION_CONFLICT: Final = "VERSION_CONFLICT"
MISSING_APPROVAL: Final = "MISSING_APPROVAL"
IDEMPOTENCY_KEY_IN_FLIGHT: Final = "IDEMPOTENCY_KEY_IN_FLIGHT"
IDEMPOTENCY_KEY_REUSED: Final = "IDEMPOTENCY_KEY_REUSED"
UPSTREAM_VALIDATION_FAILED: Final = "UPSTREAM_VALIDATION_FAILED"
REQUEST_REJECTED: Final = "REQUEST_REJECTED"
NOT_AUTHORIZED: Final = "NOT_AUTHORIZED"
CONFLICT: Final = "CONFLICT"
CLIENT_REQUEST_INVALID: Final = "CLIENT_REQUEST_INVALID"
UNREADABLE_RESPONSE: Final = "UNREADABLE_RESPONSE"
ADAPTER_EXCEPTION: Final = "ADAPTER_EXCEPTION"
ADAPTER_CONTRACT_VIOLATION: Final = "ADAPTER_CONTRACT_VIOLATION"
UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"


CATALOGUE: Final[Mapping[str, CodeSpec]] = {
    entry.code: entry
    for entry in (
        spec(
            INVALID_INPUT,
            "validation",
            "not_committed",
            "after_input_fix",
            "correct_input",
            1,
            ("fields", "field", "tool"),
            "The input was rejected before sending; nothing was written. Fields: {fields}. " + FIX,
            "The request needs corrected input.",
            "Local validation failed; nothing left the worker.",
        ),
        spec(
            INVALID_RECIPIENT_ADDRESS,
            "validation",
            "not_committed",
            "after_input_fix",
            "correct_input",
            1,
            ("field", "tool", "status"),
            "The recipient address in {field} is not deliverable; nothing was sent. " + FIX,
            "The recipient address needs to be corrected.",
            "The recipient e-mail address is malformed or its domain does not accept mail.",
        ),
        spec(
            UPSTREAM_VALIDATION_FAILED,
            "validation",
            "not_committed",
            "after_input_fix",
            "correct_input",
            1,
            ("fields", "field", "status", "tool"),
            "The downstream rejected the input (HTTP {status}); nothing was written. "
            "Fields: {fields}. " + FIX,
            "The request needs corrected input.",
            "A 400/422 naming input fields but no code the adapter knows.",
        ),
        spec(
            REQUEST_REJECTED,
            "validation",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool"),
            "The downstream rejected the request (HTTP {status}) without naming a field; "
            "nothing was written. Do not resend it; an operator will look.",
            "The request was rejected and handed to an operator.",
            "A 400/422 that names neither a known code nor an input field.",
        ),
        spec(
            NOT_AUTHORIZED,
            "authorization",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool"),
            "The downstream refused the credentials or permission (HTTP {status}); nothing "
            "was written. Changing parameters will not help; an operator will look.",
            "The action is not permitted and was handed to an operator.",
            "A 401/403 without a code the adapter knows.",
        ),
        spec(
            MISSING_APPROVAL,
            "authorization",
            "not_committed",
            "never",
            "request_approval",
            # At least one: the call that runs once a human approved (the runtime
            # escalates a request_approval with none left). The step then gets its tool's
            # whole budget again, and the envelope it shows while waiting says so.
            1,
            ("status", "tool"),
            "The action needs a human approval first; nothing was written. Request approval; "
            "do not change the parameters.",
            "The action is waiting for approval.",
            "The downstream requires an approval reference for this operation.",
        ),
        spec(
            VERSION_CONFLICT,
            "conflict",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool", "resource"),
            "The target changed since it was read (version conflict); nothing was written. "
            "Re-read the current state and make a new plan; do not resend this request.",
            "The data changed in the meantime; the action was stopped.",
            "An optimistic-concurrency check failed downstream.",
        ),
        spec(
            CONFLICT,
            "conflict",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool"),
            "The downstream reported a conflict (HTTP {status}); nothing was written. "
            "Do not resend this request; re-plan from fresh facts.",
            "The action conflicts with the current data and was stopped.",
            "A 409 without a code the adapter knows.",
        ),
        spec(
            IDEMPOTENCY_KEY_REUSED,
            "conflict",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool"),
            "The operation_ref was already used for a different request; this one was not "
            "written. An operator must decide.",
            "The action conflicts with an earlier one and was handed to an operator.",
            "Same idempotency key, different payload.",
        ),
        spec(
            IDEMPOTENCY_KEY_IN_FLIGHT,
            "conflict",
            "unknown",
            "never",
            "verify_operation",
            0,
            ("status", "tool"),
            "An earlier request with this operation_ref is still being processed downstream; "
            "the outcome is unknown and will be verified before anything is resent.",
            "We are checking whether the action took effect.",
            "A 409 saying the idempotency key is in flight; the same key is retried later.",
        ),
        spec(
            OUTCOME_UNKNOWN,
            "dependency",
            "unknown",
            "never",
            "verify_operation",
            0,
            ("reason", "status", "tool"),
            "The request may have reached the downstream ({reason}); whether it took effect "
            "is unknown. It will be verified by operation_ref; do not retry it.",
            "We are checking whether the action took effect.",
            "A write that may have been applied: timeouts after sending, dropped "
            "connections, 500/502/504.",
        ),
        spec(
            UNREADABLE_RESPONSE,
            "internal",
            "unknown",
            "never",
            "verify_operation",
            0,
            ("status", "tool"),
            "The downstream accepted the request (HTTP {status}) but its answer could not be "
            "read; the outcome will be verified by operation_ref. Do not retry it.",
            "We are checking whether the action took effect.",
            "A 2xx to a write whose body carries no usable evidence.",
        ),
        spec(
            DEPENDENCY_UNAVAILABLE,
            "dependency",
            "not_committed",
            "after_delay",
            "wait_and_retry",
            3,
            ("reason", "status", "retry_after_seconds", "tool"),
            "The downstream could not be reached or is unavailable ({reason}). " + WAIT,
            "The service is temporarily unavailable; we will retry automatically.",
            "Nothing reached the target (or the tool only reads); retry after a delay.",
        ),
        spec(
            RATE_LIMITED,
            "dependency",
            "not_committed",
            "after_delay",
            "wait_and_retry",
            3,
            ("status", "retry_after_seconds", "tool"),
            "The downstream is rate limiting (retry after {retry_after_seconds} s). " + WAIT,
            "The service is busy; we will retry automatically.",
            "HTTP 429; not_before comes from Retry-After.",
        ),
        spec(
            CLIENT_REQUEST_INVALID,
            "internal",
            "not_committed",
            "never",
            "escalate",
            0,
            ("reason", "tool"),
            "The request could not be built or sent ({reason}); nothing was written. "
            "This is a configuration or adapter bug; an operator will look.",
            "The action could not be completed and was handed to an operator.",
            "InvalidURL, UnsupportedProtocol, LocalProtocolError: a client bug.",
        ),
        spec(
            UPSTREAM_ERROR,
            "internal",
            "not_committed",
            "never",
            "escalate",
            0,
            ("status", "tool"),
            "The downstream answered with an error toolsafe does not recognise "
            "(HTTP {status}); its text was withheld. An operator will look.",
            "The action could not be completed and was handed to an operator.",
            "An upstream code not in the adapter's table, or text that looks like "
            "instructions; the upstream text is never passed on.",
        ),
        spec(
            ADAPTER_EXCEPTION,
            "internal",
            "not_committed",
            "never",
            "escalate",
            0,
            ("tool",),
            "The tool failed internally; nothing was changed. An operator will look.",
            "The action could not be completed and was handed to an operator.",
            "The adapter raised; for a write that may have sent it is unknown instead.",
        ),
        spec(
            ADAPTER_CONTRACT_VIOLATION,
            "internal",
            "not_committed",
            "never",
            "escalate",
            0,
            ("tool",),
            "The tool returned an invalid result; nothing is known to have changed. "
            "An operator will look.",
            "The action could not be completed and was handed to an operator.",
            "The adapter returned something that breaks the envelope contract.",
        ),
        spec(
            UNKNOWN_TOOL,
            "internal",
            "not_committed",
            "never",
            "escalate",
            0,
            ("tool",),
            "No worker knows this tool; nothing was sent. An operator will look.",
            "The action could not be started and was handed to an operator.",
            "The worker has no adapter for the step's tool (built by the pipeline).",
        ),
        *RUNTIME_SPECS,
    )
}

_UNKNOWN_AGENT: Final = (
    "The call ended with {code} after the request may have been sent; whether it took "
    "effect is unknown. {then}"
)
_VERIFY: Final = "It will be verified by operation_ref before any retry; do not retry it."
_CHECK: Final = "It cannot be looked up, so an operator will check it; do not retry it."
_EXHAUSTED_AGENT: Final = (
    "The call ended with {code}; nothing was written, and no retry is left. "
    "An operator will look; do not retry it."
)
_STOPPED_AGENT: Final = (
    "The call ended with {code}; nothing was written. It was handed to an operator; do not "
    "retry it."
)
_UNKNOWN_USER: Final = "We are checking whether the action took effect."
_ESCALATE_USER: Final = "The action could not be completed and was handed to an operator."


class _Blank(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "unspecified"


def spec_for(code: str) -> CodeSpec:
    """The catalogue entry of ``code``; an unknown code is a programming error."""
    try:
        return CATALOGUE[code]
    except KeyError:
        raise KeyError(f"error code {code!r} is not in toolsafe.adapters.codes.CATALOGUE") from None


def render(template: str, details: Mapping[str, object]) -> str:
    return template.format_map(_Blank(details))


def build_error(
    code: str,
    operation_ref: str,
    details: Mapping[str, object] | None = None,
    *,
    not_before: datetime | None = None,
    commit_state: CommitState | None = None,
    next_action: NextAction | None = None,
    attempts_remaining: int | None = None,
    category: Category | None = None,
) -> ToolError:
    """The envelope for ``code``: classification from the catalogue, messages from its
    templates, details filtered to its allowed keys and scanned for secrets.

    ``commit_state="unknown"`` turns any code into its may-have-been-written form
    (``never``, verify or escalate). An ``after_delay`` code with no attempts left
    escalates instead of asking for a wait that would be refused; ``escalate`` always
    comes with ``never`` and no attempts left. ``category`` overrides the code's own.
    """
    spec = spec_for(code)
    safe = safe_details_for(details or {}, spec.allowed_keys)
    state = commit_state or spec.commit_state
    directive = spec.directive
    action = next_action or spec.next_action
    remaining = spec.max_attempts_remaining if attempts_remaining is None else attempts_remaining
    remaining = max(remaining, 0)
    agent = render(spec.agent_template, safe)
    user = spec.user_template
    when = not_before if directive == "after_delay" else None
    if state == "unknown":
        directive, remaining, when = "never", 0, None
        wanted = next_action or spec.next_action
        action = wanted if wanted in ("verify_operation", "escalate") else "escalate"
        own = spec.commit_state == "unknown" and spec.next_action == action
        if not own:
            then = _VERIFY if action == "verify_operation" else _CHECK
            agent = _UNKNOWN_AGENT.format(code=spec.code, then=then)
            user = _UNKNOWN_USER if action == "verify_operation" else _ESCALATE_USER
    elif action == "escalate":
        directive, remaining, when = "never", 0, None
        if spec.next_action != "escalate":
            # The code's template asks for something else (a fix, a wait, an approval).
            agent = _STOPPED_AGENT.format(code=spec.code)
            user = _ESCALATE_USER
    elif directive == "after_delay" and (remaining < 1 or when is None):
        # A wait the runtime would refuse is not offered: no attempts (or no time) left.
        directive, action, when, remaining = "never", "escalate", None, 0
        agent = _EXHAUSTED_AGENT.format(code=spec.code)
        user = _ESCALATE_USER
    return ToolError(
        code=spec.code,
        category=category or spec.category,
        commit_state=state,
        retry=Retry(directive=directive, not_before=when, max_attempts_remaining=remaining),
        next_action=action,
        operation_ref=operation_ref,
        safe_details=safe,
        agent_message=agent[:500],
        user_message=user[:500],
    )
