"""Helpers for the Anthropic Messages API (``pip install 'toolsafe[anthropic]'``): from a
``tool_use`` block to a toolsafe submit, and from the step to a ``tool_result`` block.

    tools = toolsafe.integrations.anthropic.tools(client.catalogue())  # for messages.create
    results = await tool_results(client, message, conversation_id="conv_81")
    messages += [{"role": "assistant", "content": message.content},
                 {"role": "user", "content": results}]

- A ``tool_use`` block's ``id`` and the conversation id make the operation_ref, so a
  replayed ``tool_use`` (same id) returns the stored envelope, not a second write.
- The ``tool_result`` carries the envelope (``to_anthropic_tool_result``: ``is_error``
  exactly when ``ok`` is false), or, for a step toolsafe is still working on, the
  in-progress answer with ``is_error`` false.
- A step needing input: the model calls the tool again with the corrected fields and the
  ``operation_ref`` the envelope named (the property :func:`tools` adds); the correction
  goes to ``provide_input`` under that ref. A step awaiting approval is answered with its
  envelope (``MISSING_APPROVAL``): approve it through the client, then replay the
  ``tool_use``.

The SDK-free pieces it builds on (``anthropic_tools``, ``anthropic_ref``,
``to_anthropic_tool_result``) are :mod:`toolsafe.agents.anthropic`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from anthropic.types import Message, ToolUseBlock

from toolsafe.adapters.catalogue import Catalogue
from toolsafe.adapters.registry import Registry
from toolsafe.agents.anthropic import anthropic_ref, anthropic_tools, to_anthropic_tool_result
from toolsafe.agents.shared import tool_for_name
from toolsafe.integrations import _calls
from toolsafe.integrations._calls import DEFAULT_WAIT, Turn
from toolsafe.tasks.calls import AsyncCalls, Calls
from toolsafe.tasks.views import StepView

ToolUse = ToolUseBlock | Mapping[str, Any]
TOOL_RESULT: Final = "tool_result"


def tools(registry: Catalogue | Registry) -> list[dict[str, Any]]:
    """The Messages API ``tools`` of a client's catalogue (``client.catalogue()``), each
    also taking the ``operation_ref`` of a call to correct (see the module's docstring)."""
    made = anthropic_tools(registry)
    for tool in made:
        tool["input_schema"] = _calls.with_ref_argument(tool["name"], tool["input_schema"])
    return made


def operation_ref(tool_use_id: str, conversation_id: str, namespace: str | None = None) -> str:
    return anthropic_ref(tool_use_id, conversation_id, namespace)


def tool_result(view: StepView, tool_use_id: str) -> dict[str, Any]:
    """The ``tool_result`` block for a step: its envelope once it has one that agrees
    with its state, else the in-progress answer (never ``is_error`` for that)."""
    if _calls.turn_of(view) is not Turn.IN_PROGRESS and view.envelope is not None:
        return to_anthropic_tool_result(view.envelope, tool_use_id)
    return _text_result(_calls.model_output(view), tool_use_id, error=False)


def _text_result(output: Mapping[str, Any], tool_use_id: str, *, error: bool) -> dict[str, Any]:
    return {
        "type": TOOL_RESULT,
        "tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": _calls.as_text(output)}],
        "is_error": error,
    }


def _parts(block: ToolUse) -> tuple[str, str, dict[str, Any]]:
    if isinstance(block, ToolUseBlock):
        return block.id, block.name, dict(block.input)
    kind, call_id, name, given = (block.get(k) for k in ("type", "id", "name", "input"))
    if kind != "tool_use" or not isinstance(call_id, str) or not isinstance(name, str):
        raise ValueError("not a tool_use block: needs type 'tool_use', an id and a name")
    if not isinstance(given, Mapping):
        raise ValueError(f"tool_use {call_id}: input must be an object")
    return call_id, name, dict(given)


async def submit_tool_use(
    client: AsyncCalls,
    block: ToolUse,
    *,
    conversation_id: str,
    namespace: str | None = None,
    wait: float = DEFAULT_WAIT,
) -> dict[str, Any]:
    """Submit one ``tool_use`` block (or send its correction) and give its
    ``tool_result`` block, waiting up to ``wait`` seconds for the step to settle."""
    call_id, name, args = _parts(block)
    tool = tool_for_name(client.catalogue(), name)
    ref = operation_ref(call_id, conversation_id, namespace)
    try:
        correcting, payload = _calls.split_ref(tool, args)
        ref = correcting or ref
        if correcting:
            view = await _calls.correct(client, tool, ref, payload, wait)
        else:
            view = await _calls.submit_and_settle(client, tool, payload, ref, wait)
    except _calls.EXPECTED as error:
        return _text_result(_calls.refusal_output(error, ref), call_id, error=True)
    return tool_result(view, call_id)


def submit_tool_use_sync(
    client: Calls,
    block: ToolUse,
    *,
    conversation_id: str,
    namespace: str | None = None,
    wait: float = DEFAULT_WAIT,
) -> dict[str, Any]:
    """:func:`submit_tool_use` for a synchronous agent loop."""
    call_id, name, args = _parts(block)
    tool = tool_for_name(client.catalogue(), name)
    ref = operation_ref(call_id, conversation_id, namespace)
    try:
        correcting, payload = _calls.split_ref(tool, args)
        ref = correcting or ref
        if correcting:
            view = _calls.correct_sync(client, tool, ref, payload, wait)
        else:
            view = _calls.submit_and_settle_sync(client, tool, payload, ref, wait)
    except _calls.EXPECTED as error:
        return _text_result(_calls.refusal_output(error, ref), call_id, error=True)
    return tool_result(view, call_id)


def tool_uses(message: Message | Iterable[Any]) -> list[ToolUseBlock]:
    """The ``tool_use`` blocks of an assistant message (or of its content)."""
    content = message.content if isinstance(message, Message) else message
    return [block for block in content if isinstance(block, ToolUseBlock)]


async def tool_results(
    client: AsyncCalls,
    message: Message,
    *,
    conversation_id: str,
    namespace: str | None = None,
    wait: float = DEFAULT_WAIT,
) -> list[dict[str, Any]]:
    """A ``tool_result`` block for every ``tool_use`` of the message, in order: the
    content of the next user turn."""
    return [
        await submit_tool_use(
            client, block, conversation_id=conversation_id, namespace=namespace, wait=wait
        )
        for block in tool_uses(message)
    ]
