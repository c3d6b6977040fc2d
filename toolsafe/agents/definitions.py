"""The registered tools as tool definitions, one function per agent stack.

Each function takes a client's :class:`~toolsafe.adapters.catalogue.Catalogue` (what
``catalogue()`` of any client gives, in process or over the gateway) or a registry.
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
from typing import TYPE_CHECKING, Any, Final

from toolsafe.adapters.catalogue import Catalogue, ToolSpec, catalogue
from toolsafe.adapters.catalogue import input_schema as input_schema
from toolsafe.adapters.envelope import json_schema
from toolsafe.adapters.registry import Registry
from toolsafe.agents.progress import InProgress

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


Tools = Registry | Catalogue
"""Where the definitions come from: a client's catalogue, or a registry."""


def _schema(spec: ToolSpec) -> dict[str, Any]:
    return copy.deepcopy(dict(spec.input_schema))


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


def plain_names(registry: Tools) -> dict[str, str]:
    """Function name → toolsafe tool name, refusing two tools that would share a name."""
    names: dict[str, str] = {}
    for tool in catalogue(registry).tools():
        name = plain_name(tool)
        if name in names:
            raise ValueError(
                f"tools {names[name]!r} and {tool!r} would both be called {name!r}; rename one"
            )
        names[name] = tool
    return names


def tool_for_name(registry: Tools, name: str) -> str:
    """The toolsafe tool a model called by its function name (``UnknownToolError`` if none)."""
    found = catalogue(registry)
    if name in found:
        return name
    return plain_names(found).get(name) or found.get(name).name


def mcp_tools(registry: Tools) -> list[dict[str, Any]]:
    """MCP ``Tool`` objects as their wire JSON (``mcp.types.Tool.model_validate`` takes
    them): annotations say whether the tool only reads, and that a write repeated under
    the same operation_ref has no further effect."""
    output = tool_output_schema()
    tools: list[dict[str, Any]] = []
    for spec in catalogue(registry):
        annotations: dict[str, Any] = {"readOnlyHint": not spec.writes}
        if spec.writes:
            # toolsafe cannot tell an additive write from a destructive one: assume the
            # worst. Idempotent: the same operation_ref returns the stored step.
            annotations.update(destructiveHint=True, idempotentHint=True)
        if spec.title:
            annotations["title"] = spec.title
        tool: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "inputSchema": _schema(spec),
            "outputSchema": output,
            "annotations": annotations,
        }
        if spec.title:
            tool["title"] = spec.title
        tools.append(tool)
    return tools


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
                "parameters": _schema(spec),
                "strict": False,
            },
        }
        for spec in catalogue(registry)
    ]


def openai_responses_tools(registry: Tools) -> list[dict[str, Any]]:
    """Responses API (and Agents SDK) function tools: the same fields, not nested."""
    return [{"type": "function", **entry["function"]} for entry in openai_chat_tools(registry)]


def anthropic_tools(registry: Tools) -> list[dict[str, Any]]:
    """Anthropic Messages API ``tools``: name, description, ``input_schema``."""
    names = {tool: name for name, tool in plain_names(registry).items()}
    return [
        {
            "name": names[spec.name],
            "description": spec.description,
            "input_schema": _schema(spec),
        }
        for spec in catalogue(registry)
    ]


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
            parameters_json_schema=_schema(spec),
        )
        for spec in catalogue(registry)
    ]
