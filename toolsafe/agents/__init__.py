"""The agent-facing surface every stack shares: tool definitions from the registry
(:mod:`toolsafe.agents.definitions`), operation_refs that survive a replay
(:mod:`toolsafe.agents.refs`) and the honest "still working" answer
(:mod:`toolsafe.agents.progress`). The MCP server and the agent-SDK integrations build
on it; it never imports the gateway or the CLI (docs/agents.md)."""

from toolsafe.agents.definitions import (
    anthropic_tools,
    mcp_tools,
    openai_chat_tools,
    openai_responses_tools,
    pydantic_ai_tool_definitions,
    tool_output_schema,
)
from toolsafe.agents.progress import InProgress, in_progress
from toolsafe.agents.refs import (
    ai_sdk_ref,
    anthropic_ref,
    langgraph_ref,
    mcp_ref,
    openai_ref,
    operation_ref_for,
    pydantic_ai_ref,
)

__all__ = [
    "InProgress",
    "ai_sdk_ref",
    "anthropic_ref",
    "anthropic_tools",
    "in_progress",
    "langgraph_ref",
    "mcp_ref",
    "mcp_tools",
    "openai_chat_tools",
    "openai_ref",
    "openai_responses_tools",
    "operation_ref_for",
    "pydantic_ai_ref",
    "pydantic_ai_tool_definitions",
    "tool_output_schema",
]
