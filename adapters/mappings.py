"""A ``ToolError`` as RFC 9457 ``application/problem+json`` and back: the envelope's
HTTP shape, for any client that speaks problem details (docs/agents.md#rfc-9457). The
shapes of the agent stacks (MCP, Anthropic, OpenAI) are each in its stack's module,
``toolsafe.agents.<stack>``.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote, unquote

from toolsafe.adapters.envelope import ToolError, to_wire

PROBLEM_CONTENT_TYPE: Final = "application/problem+json"
PROBLEM_TYPE_PREFIX: Final = "urn:toolsafe:code:"
# RFC 9457 ``instance`` is a URI reference: the step as a URN (the ref percent-encoded,
# ``:`` and ``/`` kept, which a URN's name allows); the ref itself is a member too.
PROBLEM_INSTANCE_PREFIX: Final = "urn:toolsafe:operation:"

# The HTTP status a problem document carries: the code's own where it has one, then the
# commit state, then the category (docs/agents.md#rfc-9457).
_CODE_STATUS: Final = {
    "RATE_LIMITED": 429,
    "UNKNOWN_TOOL": 404,
    "CANCELLED": 409,
    "IDEMPOTENCY_KEY_IN_FLIGHT": 409,
}
# A write whose outcome is unknown: 502. toolsafe stands between the agent and the
# downstream, and the downstream gave no answer that settles the outcome. Not 500
# (toolsafe did not fail), not 503/504/429 (they invite a retry after a delay, and a
# blind retry may write twice), not 409 (the caller has nothing to change).
UNKNOWN_STATUS: Final = 502
_STATUS: Final = {
    "validation": 422,
    "authorization": 403,
    "conflict": 409,
    "dependency": 503,
    "internal": 500,
}
_TITLE: Final = {
    "validation": "The input needs correcting",
    "authorization": "Approval or permission required",
    "conflict": "The target changed; plan again",
    "dependency": "A dependency did not answer",
    "internal": "The tool failed internally",
}


def problem_status(envelope: ToolError) -> int:
    """The HTTP status of the envelope's problem: 429 for ``RATE_LIMITED``, 502 for a
    write whose outcome is unknown, 503 for a dependency to wait for, 502 for one that
    gave up, else by category (422, 403, 409, 500)."""
    if envelope.code in _CODE_STATUS:
        return _CODE_STATUS[envelope.code]
    if envelope.commit_state == "unknown":
        return UNKNOWN_STATUS
    if envelope.retry.directive == "after_delay":
        return 503
    if envelope.category == "dependency":
        return 502
    return _STATUS[envelope.category]


def problem_instance(operation_ref: str) -> str:
    """``urn:toolsafe:operation:<ref>``, the ref percent-encoded: a URI reference."""
    return PROBLEM_INSTANCE_PREFIX + quote(operation_ref, safe=":/")


def to_problem_details(envelope: ToolError) -> dict[str, Any]:
    """RFC 9457 problem details: code → ``type``, agent_message → ``detail``, the step →
    ``instance`` (:func:`problem_instance`), the status by :func:`problem_status`, the
    other envelope fields (``operation_ref`` among them) as extension members."""
    if envelope.ok:
        raise ValueError("a ToolSuccess is not a problem; only a ToolError maps to RFC 9457")
    wire = to_wire(envelope)
    problem: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + envelope.code,
        "title": _TITLE[envelope.category],
        "status": problem_status(envelope),
        "detail": envelope.agent_message,
        "instance": problem_instance(envelope.operation_ref),
        "operation_ref": envelope.operation_ref,
    }
    for key in (
        "code",
        "category",
        "commit_state",
        "retry",
        "next_action",
        "safe_details",
        "user_message",
    ):
        problem[key] = wire[key]
    return problem


def from_problem_details(problem: dict[str, Any]) -> ToolError:
    """The inverse of :func:`to_problem_details` (for clients reading problem JSON)."""
    kind = problem.get("type", "")
    if not isinstance(kind, str) or not kind.startswith(PROBLEM_TYPE_PREFIX):
        raise ValueError(f"problem type must start with {PROBLEM_TYPE_PREFIX!r}")
    return ToolError.model_validate(
        {
            "ok": False,
            "code": kind.removeprefix(PROBLEM_TYPE_PREFIX),
            "category": problem.get("category"),
            "commit_state": problem.get("commit_state"),
            "retry": problem.get("retry"),
            "next_action": problem.get("next_action"),
            "operation_ref": _operation_ref_of(problem),
            "safe_details": problem.get("safe_details", {}),
            "agent_message": problem.get("detail"),
            "user_message": problem.get("user_message"),
        }
    )


def _operation_ref_of(problem: dict[str, Any]) -> object:
    ref = problem.get("operation_ref")
    instance = problem.get("instance")
    if ref is None and isinstance(instance, str) and instance.startswith(PROBLEM_INSTANCE_PREFIX):
        return unquote(instance.removeprefix(PROBLEM_INSTANCE_PREFIX))
    return ref
