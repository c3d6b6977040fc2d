"""OpenAI's pieces, without the OpenAI SDKs: function tools for Chat Completions and for
the Responses API (and the Agents SDK), the operation_ref of a tool call and the envelope
as the answer each API expects. The Agents SDK integration that uses them is
:mod:`toolsafe.integrations.openai_agents` (extra ``openai-agents``)."""

from __future__ import annotations

from typing import Any

from toolsafe.adapters.catalogue import catalogue
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.agents.shared import (
    Tools,
    envelope_text,
    operation_ref_for,
    plain_names,
    spec_input_schema,
)


def openai_chat_tools(registry: Tools) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}``. Not
    strict: the input models' optional fields and defaults are outside strict mode."""
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        {
            "type": "function",
            "function": {
                "name": names[spec.name],
                "description": spec.description,
                "parameters": spec_input_schema(spec),
                "strict": False,
            },
        }
        for spec in catalogue(registry)
    ]


def openai_responses_tools(registry: Tools) -> list[dict[str, Any]]:
    """Responses API (and Agents SDK) function tools: the same fields, not nested."""
    return [{"type": "function", **entry["function"]} for entry in openai_chat_tools(registry)]


def openai_ref(call_id: str, run_id: str, namespace: str | None = None) -> str:
    """OpenAI (Chat Completions ``tool_calls[].id``, Responses/Agents SDK ``call_id``),
    scoped by the agent run or conversation id the application keeps."""
    return operation_ref_for("openai", run_id, call_id, namespace)


def to_openai_tool_message(envelope: AnySuccess | ToolError, tool_call_id: str) -> dict[str, Any]:
    """An OpenAI Chat Completions ``tool`` role message (content is the JSON text)."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": envelope_text(envelope)}


def to_openai_function_call_output(
    envelope: AnySuccess | ToolError, call_id: str
) -> dict[str, Any]:
    """An OpenAI Responses API (and Agents SDK) ``function_call_output`` input item, the
    answer to the model's ``function_call`` with this ``call_id``."""
    return {"type": "function_call_output", "call_id": call_id, "output": envelope_text(envelope)}
