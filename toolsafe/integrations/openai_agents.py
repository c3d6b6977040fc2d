"""toolsafe tools for the OpenAI Agents SDK (``pip install 'toolsafe[openai-agents]'``).

``ToolsafeTools(client, scope=...)`` turns registered tools into async ``FunctionTool``s,
for any asyncio client (``AsyncClient`` in process, ``AsyncGatewayClient`` with an
agent key):

- each call is submitted under the operation_ref derived from the SDK's ``call_id`` and
  ``scope`` (the run, thread or session id the application keeps across a replay), so a
  replayed call returns the stored envelope instead of writing again;
- the tool output is the step's envelope (JSON), or, for a step toolsafe is still
  working on, an honest in-progress answer naming the ref, the state and ``not_before``;
- a step awaiting approval interrupts the run through the SDK's own approval flow
  (``needs_approval``, ``result.interruptions``); :meth:`ToolsafeTools.approve` and
  :meth:`ToolsafeTools.reject` record the approver's decision in toolsafe and in the
  ``RunState`` (:meth:`ToolsafeTools.apply_decisions` carries in decisions made
  elsewhere, e.g. by an operator), and ``Runner.run(agent, state)`` resumes;
- a step needing input hands the model the envelope; the model calls the tool again with
  the corrected fields and the ``operation_ref`` the envelope named, and the correction
  goes to ``provide_input`` under that same ref.

The SDK-free pieces it builds on (function tools, :func:`~toolsafe.agents.openai.openai_ref`,
the Chat Completions and Responses API answers) are :mod:`toolsafe.agents.openai`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents import FunctionTool, RunContextWrapper, RunState, Tool, ToolApprovalItem
from agents.tool_context import ToolContext

from toolsafe.adapters.errors import INPUT_NOT_JSON
from toolsafe.agents.openai import openai_ref, openai_responses_tools
from toolsafe.agents.shared import tool_for_name
from toolsafe.integrations import _calls
from toolsafe.integrations._calls import DEFAULT_WAIT, Turn
from toolsafe.recovery.states import StepState
from toolsafe.tasks.calls import AsyncCalls
from toolsafe.tasks.views import StepView

REF_ARGUMENT: Final = _calls.REF_ARGUMENT
REJECTED_EVENT: Final = "rejected"


class ToolsafeTools:
    """The registered tools as Agents SDK function tools, all under one ``scope``."""

    def __init__(
        self,
        client: AsyncCalls,
        *,
        scope: str,
        namespace: str | None = None,
        wait: float = DEFAULT_WAIT,
        tools: Iterable[str] | None = None,
    ) -> None:
        if not scope:
            raise ValueError("scope must name the run, thread or session the calls belong to")
        self.client = client
        self.scope = scope
        self.namespace = namespace
        self.wait = wait
        registry = client.catalogue()
        self.names = tuple(tools) if tools is not None else registry.tools()
        for name in self.names:
            registry.get(name)  # an unknown tool fails here, naming the known ones
        # What needs_approval settled a call to, for the invocation that follows it.
        self._settled: dict[str, StepView | dict[str, Any]] = {}

    def operation_ref(self, call_id: str) -> str:
        """The stable operation_ref of the model's tool call ``call_id`` in this scope."""
        return openai_ref(call_id, self.scope, self.namespace)

    def tools(self) -> list[Tool]:
        registry = self.client.catalogue()
        return [
            self._tool(tool_for_name(registry, definition["name"]), definition)
            for definition in openai_responses_tools(registry)
            if tool_for_name(registry, definition["name"]) in self.names
        ]

    # ------------------------------------------------------------------ approvals

    def step_ref(self, item: ToolApprovalItem) -> str:
        """The operation_ref of the step an approval item stands for."""
        raw = item.raw_item
        call_id = getattr(raw, "call_id", None)
        arguments = getattr(raw, "arguments", None)
        if not isinstance(call_id, str):
            raise ValueError("the approval item is not a function tool call")
        parsed = _parsed(arguments if isinstance(arguments, str) else "{}") or {}
        correcting = parsed.get(REF_ARGUMENT)
        return correcting if isinstance(correcting, str) else self.operation_ref(call_id)

    async def approve(
        self, state: RunState[Any], item: ToolApprovalItem, *, approver: str, reason: str
    ) -> StepView:
        """Record the approval in toolsafe (who, why), then in the run's state."""
        view = await self.client.approve(self.step_ref(item), approver, reason)
        state.approve(item)
        self._forget(item)
        return view

    async def reject(
        self, state: RunState[Any], item: ToolApprovalItem, *, approver: str, reason: str
    ) -> StepView:
        """Record the rejection in toolsafe; the model is given the failed step's envelope."""
        view = await self.client.reject(self.step_ref(item), approver, reason)
        state.reject(item, rejection_message=_calls.as_text(_calls.model_output(view)))
        self._forget(item)
        return view

    async def apply_decisions(self, state: RunState[Any]) -> list[StepView]:
        """Carry into the run's state the decisions already recorded in toolsafe (an
        operator's ``toolsafe approve``/``reject``, the gateway, another process): each
        interruption whose step no longer awaits approval is approved or rejected in
        the state as toolsafe recorded it; the others stay pending. Returns the steps."""
        views = []
        for item in state.get_interruptions():
            view = await self.client.view(self.step_ref(item))
            views.append(view)
            if view.state is StepState.AWAITING_APPROVAL:
                continue
            if any(entry.kind == REJECTED_EVENT for entry in view.history):
                answer = _calls.as_text(_calls.model_output(view))
                state.reject(item, rejection_message=answer)
            else:
                state.approve(item)
            self._forget(item)
        return views

    def _forget(self, item: ToolApprovalItem) -> None:
        call_id = getattr(item.raw_item, "call_id", None)
        if isinstance(call_id, str):
            self._settled.pop(call_id, None)

    # ------------------------------------------------------------------ the tools

    def _tool(self, name: str, definition: Mapping[str, Any]) -> FunctionTool:
        schema = _calls.with_ref_argument(name, definition["parameters"])

        async def needs_approval(
            context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            # toolsafe learns that a step needs approval only by running it, and the SDK
            # asks before it invokes the tool: so the call is submitted here, and what it
            # settled to is kept for the invocation that follows (a repeat of the same
            # ref is free, R2).
            found = await self._settle(name, call_id, dict(params))
            self._settled[call_id] = found
            return isinstance(found, StepView) and _calls.turn_of(found) is Turn.AWAITING_APPROVAL

        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            found = self._settled.pop(context.tool_call_id, None)
            if found is None or (
                isinstance(found, StepView) and _calls.turn_of(found) is Turn.AWAITING_APPROVAL
            ):
                # Resumed after a decision (maybe in another process): look again.
                found = await self._settle(name, context.tool_call_id, _parsed(arguments))
            if isinstance(found, StepView):
                return _calls.as_text(_calls.model_output(found))
            return _calls.as_text(found)

        return FunctionTool(
            name=definition["name"],
            description=definition["description"],
            params_json_schema=schema,
            on_invoke_tool=invoke,
            strict_json_schema=False,
            needs_approval=needs_approval,
        )

    async def _settle(
        self, tool: str, call_id: str, args: Mapping[str, Any] | None
    ) -> StepView | dict[str, Any]:
        """The step of this call, settled up to the wait bound; or a refusal's answer."""
        if args is None:
            return _calls.refused(INPUT_NOT_JSON, "the arguments are not a JSON object")
        ref = self.operation_ref(call_id)
        try:
            correcting, payload = _calls.split_ref(tool, args)
            ref = correcting or ref
            if correcting:
                return await _calls.correct(self.client, tool, ref, payload, self.wait)
            return await _calls.submit_and_settle(self.client, tool, payload, ref, self.wait)
        except _calls.EXPECTED as error:
            return _calls.refusal_output(error, ref)


def _parsed(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
