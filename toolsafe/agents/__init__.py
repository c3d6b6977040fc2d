"""The agent-facing surface, one module per stack with its SDK-free pieces — tool
definitions, the replay-stable operation_ref rule and the envelope in the shape the
stack expects: :mod:`~toolsafe.agents.mcp`, :mod:`~toolsafe.agents.openai`,
:mod:`~toolsafe.agents.anthropic`, :mod:`~toolsafe.agents.pydantic_ai`,
:mod:`~toolsafe.agents.langgraph`, :mod:`~toolsafe.agents.ai_sdk`; what they share
(names, the ref rule, the output schema, the honest "still working" answer) is
:mod:`~toolsafe.agents.shared`. No module here imports an SDK at import time; the
integrations that do (:mod:`toolsafe.integrations`, :mod:`toolsafe.mcp`) build on them
and this package never imports the gateway or the CLI (docs/agents.md)."""

from toolsafe.agents.ai_sdk import ai_sdk_ref
from toolsafe.agents.anthropic import anthropic_ref, anthropic_tools, to_anthropic_tool_result
from toolsafe.agents.langgraph import langgraph_ref
from toolsafe.agents.mcp import mcp_ref, mcp_tools, to_mcp_call_tool_result
from toolsafe.agents.openai import (
    openai_chat_tools,
    openai_ref,
    openai_responses_tools,
    to_openai_function_call_output,
    to_openai_tool_message,
)
from toolsafe.agents.pydantic_ai import pydantic_ai_ref, pydantic_ai_tool_definitions
from toolsafe.agents.shared import (
    InProgress,
    envelope_text,
    in_progress,
    operation_ref_for,
    plain_name,
    tool_for_name,
    tool_output_schema,
)

__all__ = [
    "InProgress",
    "ai_sdk_ref",
    "anthropic_ref",
    "anthropic_tools",
    "envelope_text",
    "in_progress",
    "langgraph_ref",
    "mcp_ref",
    "mcp_tools",
    "openai_chat_tools",
    "openai_ref",
    "openai_responses_tools",
    "operation_ref_for",
    "plain_name",
    "pydantic_ai_ref",
    "pydantic_ai_tool_definitions",
    "to_anthropic_tool_result",
    "to_mcp_call_tool_result",
    "to_openai_function_call_output",
    "to_openai_tool_message",
    "tool_for_name",
    "tool_output_schema",
]
