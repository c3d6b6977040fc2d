"""MCP's pieces, without the MCP SDK: the registry as ``Tool`` objects, the operation_ref
of a ``tools/call`` and the envelope as a ``CallToolResult``. The server that uses them,
on the official SDK, is :mod:`toolsafe.mcp` (``toolsafe mcp``, docs/mcp.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from toolsafe.adapters.catalogue import catalogue
from toolsafe.adapters.envelope import (
    MAX_OPERATION_REF,
    OPERATION_REF_PATTERN,
    AnySuccess,
    ToolError,
    to_wire,
)
from toolsafe.agents.shared import Tools, operation_ref_for, spec_input_schema, tool_output_schema

# The `_meta` keys an MCP client sends with tools/call (docs/agents.md): the ref itself,
# or the model's tool-call id and the agent's session/run id to build it from.
MCP_META_REF: Final = "toolsafe/operation_ref"
MCP_META_CALL: Final = "toolsafe/call_id"
MCP_META_SESSION: Final = "toolsafe/session"


def mcp_tools(registry: Tools) -> list[dict[str, Any]]:
    """MCP ``Tool`` objects as their wire JSON (``mcp.types.Tool.model_validate`` takes
    them): the output schema is the envelope or the in-progress answer; annotations say
    whether the tool only reads, and that a write repeated under the same operation_ref
    has no further effect."""
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
            "inputSchema": spec_input_schema(spec),
            "outputSchema": output,
            "annotations": annotations,
        }
        if spec.title:
            tool["title"] = spec.title
        tools.append(tool)
    return tools


def mcp_ref(
    meta: Mapping[str, object] | None,
    session_id: str,
    request_id: str | int,
    namespace: str | None = None,
) -> str:
    """The operation_ref of an MCP ``tools/call``, in this order:

    1. ``_meta["toolsafe/operation_ref"]``: the client's own ref, used as it is (inside
       the namespace);
    2. ``_meta["toolsafe/call_id"]`` (the model's tool-call id the host keeps), scoped by
       ``_meta["toolsafe/session"]`` or else the MCP session: what a replaying host
       sends again;
    3. otherwise the MCP session and the JSON-RPC request id: a request re-sent inside
       one session is the same call, but nothing of it survives a reconnect, so a host
       that replays must send 1 or 2.
    """
    given = (meta or {}).get(MCP_META_REF)
    if given is not None:
        if not isinstance(given, str) or not given:
            raise ValueError(f"_meta[{MCP_META_REF!r}] must be a non-empty string")
        inside = namespace is None or given.startswith(f"{namespace}/")
        ref = given if inside else f"{namespace}/{given}"
        if len(ref) > MAX_OPERATION_REF or not OPERATION_REF_PATTERN.fullmatch(ref):
            raise ValueError(
                f"_meta[{MCP_META_REF!r}] is not a usable operation_ref: 1 to "
                f"{MAX_OPERATION_REF} letters, digits and _ . : / -, starting with a letter "
                "or digit"
            )
        return ref
    call = (meta or {}).get(MCP_META_CALL)
    if call is not None:
        if not isinstance(call, str) or not call:
            raise ValueError(f"_meta[{MCP_META_CALL!r}] must be a non-empty string")
        scope = (meta or {}).get(MCP_META_SESSION, session_id)
        if not isinstance(scope, str) or not scope:
            raise ValueError(f"_meta[{MCP_META_SESSION!r}] must be a non-empty string")
        return operation_ref_for("mcp", scope, call, namespace)
    return operation_ref_for("mcp", session_id, f"req-{request_id}", namespace)


def to_mcp_call_tool_result(
    envelope: AnySuccess | ToolError | Mapping[str, Any], text: str | None = None
) -> dict[str, Any]:
    """An MCP ``CallToolResult``: the envelope as structured content and, for hosts that
    forward only ``content``, as text: ``text`` first when given (the short model text:
    what happened, the operation_ref, on success the evidence id), then the envelope's
    JSON, as MCP asks of a tool with structured content. ``envelope`` is a model or its
    wire JSON (a step's stored envelope); ``isError`` is exactly "``ok`` is not true".
    ``toolsafe mcp`` answers with this mapping (``toolsafe.mcp.results``)."""
    wire = dict(envelope) if isinstance(envelope, Mapping) else to_wire(envelope)
    blocks = [] if text is None else [{"type": "text", "text": text}]
    blocks.append(
        {"type": "text", "text": json.dumps(wire, separators=(",", ":"), ensure_ascii=False)}
    )
    return {"content": blocks, "structuredContent": wire, "isError": wire.get("ok") is not True}
