"""The catalogue envelope an adapter answers with, once for the function and the HTTP
adapters (their ``error`` methods): the code's classification and messages
(``codes.build_error``), the tool named in its details, and an unknown outcome sent to
verification only when the tool has a lookup (escalated otherwise)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import NextAction, ToolError

__all__ = ["tool_error"]


def tool_error(
    tool: str,
    has_lookup: bool,
    code: str,
    operation_ref: str,
    details: Mapping[str, object] | None = None,
    *,
    not_before: datetime | None = None,
    unknown: bool = False,
    attempts_left: int | None = None,
) -> ToolError:
    """A catalogue envelope for ``tool``; an unknown outcome is verified only when there
    is a lookup; ``attempts_left`` caps a wait's attempts remaining."""
    spec = codes.spec_for(code)
    is_unknown = unknown or spec.commit_state == "unknown"
    action: NextAction | None = None
    if is_unknown:
        action = "verify_operation" if has_lookup else "escalate"
    return codes.build_error(
        code,
        operation_ref,
        {"tool": tool, **(details or {})},
        not_before=not_before,
        commit_state="unknown" if is_unknown else None,
        next_action=action,
        attempts_remaining=(
            min(attempts_left, spec.max_attempts_remaining)
            if attempts_left is not None and spec.directive == "after_delay"
            else None
        ),
    )
