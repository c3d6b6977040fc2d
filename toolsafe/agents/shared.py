"""What every agent stack shares: the function names a tool is offered under, the output
schema, the operation_ref rule, the envelope as text and the honest "still working"
answer. Each stack's own pieces sit in its module beside this one (docs/agents.md).

Names. OpenAI and Anthropic names allow only letters, digits, ``_`` and ``-``: a toolsafe
name with a dot is given with ``_`` instead, and :func:`tool_for_name` maps it back; two
tools that would get the same name are refused.

The operation_ref rule, the same for every stack::

    [<namespace>/]<stack>:<scope>:<call>

``stack`` names the framework (:data:`STACKS`), ``scope`` is the run, thread or session
id, ``call`` the tool-call id. A part made only of letters, digits, ``_`` and ``-``, at
most :data:`MAX_PART` long, is kept as it is; any other part becomes a readable prefix, a
dot and a hash of the whole (``run.3f9c…``), which no kept part can equal (kept parts
have no dot). The result is deterministic, at most 200 characters with a namespace of
up to 100, and always a valid operation_ref: a crashed and replayed agent submits the
same ref and gets the stored step back instead of causing a second write.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.adapters.catalogue import Catalogue, ToolSpec, catalogue
from toolsafe.adapters.envelope import (
    MAX_OPERATION_REF,
    OPERATION_REF_PATTERN,
    AnySuccess,
    ToolError,
    json_schema,
    to_wire,
)
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.states import NEEDS_AGENT
from toolsafe.tasks.views import StepView

Tools = Registry | Catalogue
"""Where the definitions come from: a client's catalogue, or a registry."""

_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def spec_input_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's input schema, a copy a stack's definition may own and change."""
    return copy.deepcopy(dict(spec.input_schema))


# ----------------------------------------------------------------------------- in progress


class InProgress(BaseModel):
    """toolsafe still owns this call and will finish it by itself: the answer for a step
    that is queued, running, waiting to retry or verifying. Not an error, and not a
    result: it names the operation_ref, the state and ``not_before`` so the model (or its
    host) waits instead of calling again."""

    model_config = ConfigDict(extra="forbid", title="InProgress")

    in_progress: Literal[True] = True
    operation_ref: str
    tool: str
    state: str = Field(description="pending, in_flight, waiting_retry or verifying")
    not_before: datetime | None = Field(
        None, description="the earliest time the step runs again (waiting_retry)"
    )
    last_envelope: dict[str, Any] | None = Field(
        None, description="the envelope of the previous attempt, if there was one"
    )
    agent_message: str = Field(description="what to tell the model: wait, do not call again")


def in_progress(view: StepView) -> InProgress:
    """The in-progress answer for a step that does not need the agent yet."""
    if view.state in NEEDS_AGENT:
        raise ValueError(f"step {view.operation_ref} is {view.state}: answer with its envelope")
    waiting = view.due_at if str(view.state) == "waiting_retry" else None
    return InProgress(
        operation_ref=view.operation_ref,
        tool=view.tool,
        state=str(view.state),
        not_before=waiting,
        last_envelope=view.envelope_json(),
        agent_message=view.text,
    )


def in_progress_text(answer: InProgress) -> str:
    """One line for a text channel; the model reads it as "wait", never as a failure."""
    when = f", not before {answer.not_before.isoformat()}" if answer.not_before else ""
    return (
        f"Still in progress (operation_ref {answer.operation_ref}, state {answer.state}"
        f"{when}): {answer.agent_message} toolsafe finishes it by itself; ask again with "
        "the same operation_ref instead of making a new call."
    )


def tool_output_schema() -> dict[str, Any]:
    """What a tool call answers: the envelope (``ToolResult``: a success or an error),
    or :class:`InProgress` while toolsafe still works on it. A top-level
    ``"type": "object"``, as MCP requires of an ``outputSchema``."""
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


def envelope_text(envelope: AnySuccess | ToolError) -> str:
    """The envelope as compact JSON text (what a text-only channel shows the model)."""
    return json.dumps(to_wire(envelope), separators=(",", ":"), ensure_ascii=False)


# ----------------------------------------------------------------------------- refs

Stack = Literal["openai", "anthropic", "pydantic_ai", "langgraph", "mcp", "ai_sdk"]
STACKS: Final[tuple[Stack, ...]] = (
    "openai",
    "anthropic",
    "pydantic_ai",
    "langgraph",
    "mcp",
    "ai_sdk",
)
MAX_PART: Final = 40
_KEPT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_\-]+")
_HASH_CHARS: Final = 20
_NAMESPACE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}")


def ref_part(value: str) -> str:
    """One part of a ref: ``value`` when it is short and plain, else prefix.hash."""
    if not isinstance(value, str) or not value:
        raise ValueError("a ref part must be non-empty text")
    if len(value) <= MAX_PART and _KEPT.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    prefix = _UNSAFE.sub("", value).lstrip("_-")[: MAX_PART - _HASH_CHARS - 1]
    return f"{prefix or 'h'}.{digest}"


def operation_ref_for(stack: Stack, scope: str, call: str, namespace: str | None = None) -> str:
    """The operation_ref of one tool call of a framework: ``scope`` is the run, thread or
    session id, ``call`` the tool-call id, ``namespace`` the gateway key's namespace
    (the gateway adds it anyway; given here, the ref is the same either way)."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; one of {', '.join(STACKS)}")
    if not scope:
        raise ValueError(
            f"a {stack} operation_ref needs the run, thread or session id: a tool-call id "
            "alone is not unique across runs"
        )
    if not call:
        raise ValueError(f"a {stack} operation_ref needs the tool-call id")
    ref = f"{stack}:{ref_part(scope)}:{ref_part(call)}"
    if namespace is not None:
        if not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"namespace {namespace!r}: 1-100 letters, digits and _ . : -")
        ref = f"{namespace}/{ref}"
    # Holds by construction; a check keeps a future change of the rule honest.
    assert len(ref) <= MAX_OPERATION_REF and OPERATION_REF_PATTERN.fullmatch(ref), ref
    return ref
