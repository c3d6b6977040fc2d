"""Pydantic AI's pieces: ``ToolDefinition`` objects (the one piece that needs the SDK,
imported when called) and the operation_ref of a tool call. The toolset that uses them
is :mod:`toolsafe.integrations.pydantic_ai` (extra ``pydantic-ai``); it answers with the
envelope or the in-progress answer as the tool's return value, so there is no mapping
of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolsafe.adapters.catalogue import catalogue
from toolsafe.agents.shared import Tools, operation_ref_for, plain_names, spec_input_schema

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition


def pydantic_ai_tool_definitions(registry: Tools) -> list[ToolDefinition]:
    """Pydantic AI ``ToolDefinition`` objects (needs the ``pydantic-ai`` extra)."""
    try:
        from pydantic_ai.tools import ToolDefinition
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "Pydantic AI tool definitions need the extra: pip install 'toolsafe[pydantic-ai]'"
        ) from error
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        ToolDefinition(
            name=names[spec.name],
            description=spec.description,
            parameters_json_schema=spec_input_schema(spec),
        )
        for spec in catalogue(registry)
    ]


def pydantic_ai_ref(tool_call_id: str, scope: str, namespace: str | None = None) -> str:
    """Pydantic AI: ``RunContext.tool_call_id``, scoped by the conversation
    (``RunContext.conversation_id``, else the run id): a run resumed from deferred
    results gets a new run id but keeps its conversation, and some models number their
    calls per run, so the scope is what makes the ref unique."""
    return operation_ref_for("pydantic_ai", scope, tool_call_id, namespace)
