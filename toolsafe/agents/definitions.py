"""The registry as tool definitions, one function per agent stack.

Every stack gets the same three facts per tool: its name, what it does
(``Adapter.describe()``) and its input schema (the adapter's input model). MCP also gets
the output schema (the envelope, or the in-progress answer) and annotations from whether
the tool writes. OpenAI and Anthropic names allow only letters, digits, ``_`` and ``-``:
a toolsafe name with a dot is given with ``_`` instead, and :func:`tool_for_name` maps it
back; two tools that would get the same name are refused.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from toolsafe.adapters.envelope import json_schema
from toolsafe.adapters.protocol import Adapter
from toolsafe.adapters.registry import Registry
from toolsafe.agents.progress import InProgress

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _adapters(registry: Registry) -> Iterator[Adapter[Any]]:
    for name in registry.tools():
        yield registry.get(name)


def input_schema(adapter: Adapter[Any]) -> dict[str, Any]:
    """The adapter's input model as JSON Schema (always a top-level object)."""
    schema: dict[str, Any] = adapter.input_model.model_json_schema()
    schema.setdefault("type", "object")
    return schema


def tool_output_schema() -> dict[str, Any]:
    """What a tool call answers: the envelope (``ToolResult``: a success or an error),
    or :class:`~toolsafe.agents.progress.InProgress` while toolsafe still works on it.
    A top-level ``"type": "object"``, as MCP requires of an ``outputSchema``."""
    schema = copy.deepcopy(json_schema())
    progress = InProgress.model_json_schema()
    definitions: dict[str, Any] = schema.setdefault("$defs", {})
    definitions.update(progress.pop("$defs", {}))
    definitions["InProgress"] = progress
    # ``discriminator`` is an OpenAPI keyword that JSON Schema validators ignore; the
    # variants are told apart by their required fields (``ok``, ``in_progress``).
    schema.pop("discriminator", None)
    schema.pop("$schema", None)
    variants = schema.pop("oneOf")
    schema["type"] = "object"
    schema["title"] = "ToolAnswer"
    schema["oneOf"] = [*variants, {"$ref": "#/$defs/InProgress"}]
    return schema


def plain_name(tool: str) -> str:
    """The name a stack that allows only ``[A-Za-z0-9_-]`` calls the tool by."""
    name = tool.replace(".", "_")
    if not _PLAIN_NAME.fullmatch(name):
        raise ValueError(f"tool name {tool!r} cannot be given as a function name")
    return name


def plain_names(registry: Registry) -> dict[str, str]:
    """Function name → toolsafe tool name, refusing two tools that would share a name."""
    names: dict[str, str] = {}
    for tool in registry.tools():
        name = plain_name(tool)
        if name in names:
            raise ValueError(
                f"tools {names[name]!r} and {tool!r} would both be called {name!r}; rename one"
            )
        names[name] = tool
    return names


def tool_for_name(registry: Registry, name: str) -> str:
    """The toolsafe tool a model called by its function name (``UnknownToolError`` if none)."""
    if name in registry:
        return name
    return plain_names(registry).get(name) or registry.get(name).tool


def mcp_tools(registry: Registry) -> list[dict[str, Any]]:
    """MCP ``Tool`` objects as their wire JSON (``mcp.types.Tool.model_validate`` takes
    them): annotations say whether the tool only reads, and that a write repeated under
    the same operation_ref has no further effect."""
    output = tool_output_schema()
    tools: list[dict[str, Any]] = []
    for adapter in _adapters(registry):
        annotations: dict[str, Any] = {"readOnlyHint": not adapter.writes}
        if adapter.writes:
            # toolsafe cannot tell an additive write from a destructive one: assume the
            # worst. Idempotent: the same operation_ref returns the stored step.
            annotations.update(destructiveHint=True, idempotentHint=True)
        if adapter.title:
            annotations["title"] = adapter.title
        tool: dict[str, Any] = {
            "name": adapter.tool,
            "description": adapter.describe(),
            "inputSchema": input_schema(adapter),
            "outputSchema": output,
            "annotations": annotations,
        }
        if adapter.title:
            tool["title"] = adapter.title
        tools.append(tool)
    return tools


def openai_chat_tools(registry: Registry) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}``. Not
    strict: the input models' optional fields and defaults are outside strict mode."""
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        {
            "type": "function",
            "function": {
                "name": names[adapter.tool],
                "description": adapter.describe(),
                "parameters": input_schema(adapter),
                "strict": False,
            },
        }
        for adapter in _adapters(registry)
    ]


def openai_responses_tools(registry: Registry) -> list[dict[str, Any]]:
    """Responses API (and Agents SDK) function tools: the same fields, not nested."""
    return [{"type": "function", **entry["function"]} for entry in openai_chat_tools(registry)]


def anthropic_tools(registry: Registry) -> list[dict[str, Any]]:
    """Anthropic Messages API ``tools``: name, description, ``input_schema``."""
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        {
            "name": names[adapter.tool],
            "description": adapter.describe(),
            "input_schema": input_schema(adapter),
        }
        for adapter in _adapters(registry)
    ]


def pydantic_ai_tool_definitions(registry: Registry) -> list[ToolDefinition]:
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
            name=names[adapter.tool],
            description=adapter.describe(),
            parameters_json_schema=input_schema(adapter),
        )
        for adapter in _adapters(registry)
    ]
