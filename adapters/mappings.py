"""The envelope in the shapes agent stacks expect, all in one place.

MCP ``CallToolResult``, Anthropic ``tool_result`` blocks, OpenAI tool messages and
RFC 9457 ``application/problem+json``. Each carries the same envelope JSON, so the model
sees the same facts whichever stack it runs on.
"""

from __future__ import annotations

import json
from typing import Any, Final

from toolsafe.adapters.envelope import AnySuccess, ToolError, to_wire

PROBLEM_CONTENT_TYPE: Final = "application/problem+json"
PROBLEM_TYPE_PREFIX: Final = "urn:toolsafe:code:"

# The HTTP status a problem document carries, by category; an unknown outcome is a
# gateway-style failure (the call may have happened), not a server bug.
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


def envelope_text(envelope: AnySuccess | ToolError) -> str:
    """The envelope as compact JSON text (what a text-only channel shows the model)."""
    return json.dumps(to_wire(envelope), separators=(",", ":"), ensure_ascii=False)


def to_mcp_call_tool_result(envelope: AnySuccess | ToolError) -> dict[str, Any]:
    """An MCP ``CallToolResult``: structured content plus the same JSON as a text block."""
    return {
        "content": [{"type": "text", "text": envelope_text(envelope)}],
        "structuredContent": to_wire(envelope),
        "isError": not envelope.ok,
    }


def to_anthropic_tool_result(envelope: AnySuccess | ToolError, tool_use_id: str) -> dict[str, Any]:
    """An Anthropic Messages API ``tool_result`` content block."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": envelope_text(envelope)}],
        "is_error": not envelope.ok,
    }


def to_openai_tool_message(envelope: AnySuccess | ToolError, tool_call_id: str) -> dict[str, Any]:
    """An OpenAI Chat Completions ``tool`` role message (content is the JSON text)."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": envelope_text(envelope)}


def to_problem_details(envelope: ToolError) -> dict[str, Any]:
    """RFC 9457 problem details: code → ``type``, agent_message → ``detail``,
    operation_ref → ``instance``, the other envelope fields as extension members."""
    if envelope.ok:
        raise ValueError("a ToolSuccess is not a problem; only a ToolError maps to RFC 9457")
    wire = to_wire(envelope)
    problem: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + envelope.code,
        "title": _TITLE[envelope.category],
        "status": _STATUS[envelope.category],
        "detail": envelope.agent_message,
        "instance": envelope.operation_ref,
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
            "operation_ref": problem.get("instance"),
            "safe_details": problem.get("safe_details", {}),
            "agent_message": problem.get("detail"),
            "user_message": problem.get("user_message"),
        }
    )
