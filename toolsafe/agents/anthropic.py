"""Anthropic's pieces, without the ``anthropic`` SDK: the Messages API ``tools``, the
operation_ref of a ``tool_use`` block and the envelope as a ``tool_result`` block. The
integration that uses them, from a message's ``tool_use`` blocks to their results, is
:mod:`toolsafe.integrations.anthropic` (extra ``anthropic``)."""

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


def anthropic_tools(registry: Tools) -> list[dict[str, Any]]:
    """Anthropic Messages API ``tools``: name, description, ``input_schema``."""
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        {
            "name": names[spec.name],
            "description": spec.description,
            "input_schema": spec_input_schema(spec),
        }
        for spec in catalogue(registry)
    ]


def anthropic_ref(tool_use_id: str, conversation_id: str, namespace: str | None = None) -> str:
    """Anthropic Messages: the ``tool_use`` block's ``id``, scoped by the conversation."""
    return operation_ref_for("anthropic", conversation_id, tool_use_id, namespace)


def to_anthropic_tool_result(envelope: AnySuccess | ToolError, tool_use_id: str) -> dict[str, Any]:
    """An Anthropic Messages API ``tool_result`` content block."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": envelope_text(envelope)}],
        "is_error": not envelope.ok,
    }
