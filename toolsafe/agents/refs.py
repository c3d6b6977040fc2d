"""operation_refs that survive a replay: built from what the agent framework keeps when
it re-runs a step (the model's tool-call id, and the run, thread or session it belongs
to), so a crashed and replayed agent submits the same ref and gets the stored step back
instead of causing a second write.

The rule, the same for every stack (docs/agents.md)::

    [<namespace>/]<stack>:<scope>:<call>

``stack`` names the framework (:data:`STACKS`), ``scope`` is the run, thread or session
id, ``call`` the tool-call id. A part made only of letters, digits, ``_`` and ``-``, at
most :data:`MAX_PART` long, is kept as it is; any other part becomes a readable prefix, a
dot and a hash of the whole (``run.3f9c…``), which no kept part can equal (kept parts
have no dot). The result is deterministic, at most 200 characters with a namespace of
up to 100, and always a valid operation_ref.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Final, Literal

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN

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

# The `_meta` keys an MCP client sends with tools/call (docs/agents.md): the ref itself,
# or the model's tool-call id and the agent's session/run id to build it from.
MCP_META_REF: Final = "toolsafe/operation_ref"
MCP_META_CALL: Final = "toolsafe/call_id"
MCP_META_SESSION: Final = "toolsafe/session"


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


def openai_ref(call_id: str, run_id: str, namespace: str | None = None) -> str:
    """OpenAI (Chat Completions ``tool_calls[].id``, Responses/Agents SDK ``call_id``),
    scoped by the agent run or conversation id the application keeps."""
    return operation_ref_for("openai", run_id, call_id, namespace)


def anthropic_ref(tool_use_id: str, conversation_id: str, namespace: str | None = None) -> str:
    """Anthropic Messages: the ``tool_use`` block's ``id``, scoped by the conversation."""
    return operation_ref_for("anthropic", conversation_id, tool_use_id, namespace)


def pydantic_ai_ref(tool_call_id: str, scope: str, namespace: str | None = None) -> str:
    """Pydantic AI: ``RunContext.tool_call_id``, scoped by the conversation
    (``RunContext.conversation_id``, else the run id): a run resumed from deferred
    results gets a new run id but keeps its conversation, and some models number their
    calls per run, so the scope is what makes the ref unique."""
    return operation_ref_for("pydantic_ai", scope, tool_call_id, namespace)


def langgraph_ref(tool_call_id: str, thread_id: str, namespace: str | None = None) -> str:
    """LangGraph: the ``ToolCall``'s ``id``, scoped by the checkpointer's ``thread_id``
    (a graph resumed from its checkpoint replays the same message, so the same id)."""
    return operation_ref_for("langgraph", thread_id, tool_call_id, namespace)


def ai_sdk_ref(tool_call_id: str, run_id: str, namespace: str | None = None) -> str:
    """The Vercel AI SDK (TypeScript): the ``toolCallId`` its ``execute`` and approval
    functions are given, scoped by the run or conversation id the application keeps
    across a replay. ``@toolsafe/client``'s ``aiSdkRef`` (clients/typescript) is the
    same rule; the two are checked against each other."""
    return operation_ref_for("ai_sdk", run_id, tool_call_id, namespace)


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
