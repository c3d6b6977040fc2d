"""A step's view as an MCP ``CallToolResult``, through the one mapping of the envelope
(``toolsafe.agents.mcp.to_mcp_call_tool_result``): the envelope as structured
content, the short model text (the evidence id on a success) and the envelope's JSON as
text content, ``isError`` exactly when the envelope's ``ok`` is false; a step toolsafe is
still working on answers "in progress", never an error."""

from __future__ import annotations

import json
from typing import Final

from mcp_types import CallToolResult, TextContent

from toolsafe.agents.mcp import to_mcp_call_tool_result
from toolsafe.agents.shared import in_progress, in_progress_text
from toolsafe.tasks.views import StepView

# Where a result names its step, for hosts that keep it (docs/mcp.md).
META_REF: Final = "toolsafe/operation_ref"
META_STATE: Final = "toolsafe/state"


def _meta(view: StepView) -> dict[str, object]:
    return {META_REF: view.operation_ref, META_STATE: str(view.state)}


def call_tool_result(view: StepView) -> CallToolResult:
    """The answer for ``view`` as it is now: its envelope once the step needs the agent
    or is over, else the in-progress answer."""
    if not view.needs_agent:
        progress = in_progress(view)
        return CallToolResult(
            content=[TextContent(type="text", text=in_progress_text(progress))],
            structured_content=progress.model_dump(mode="json"),
            is_error=False,
            meta=_meta(view),
        )
    envelope = view.envelope
    if envelope is None:  # pragma: no cover - every state that needs the agent has one
        raise ValueError(f"step {view.operation_ref} is {view.state} without an envelope")
    mapped = to_mcp_call_tool_result(envelope, view.text)
    return CallToolResult.model_validate({**mapped, "_meta": _meta(view)})


def refusal_result(
    code: str, message: str, fields: tuple[tuple[str, str], ...] = ()
) -> CallToolResult:
    """A call toolsafe refused before any step ran (bad input, a ref that names another
    call): an error the model can act on, with nothing written anywhere."""
    detail = {"code": code, "fields": [{"field": name, "code": why} for name, why in fields]}
    text = f"{message} Nothing was sent. ({json.dumps(detail, separators=(',', ':'))})"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
