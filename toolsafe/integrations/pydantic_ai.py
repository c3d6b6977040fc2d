"""A Pydantic AI toolset whose tools go through toolsafe
(``pip install 'toolsafe[pydantic-ai]'``).

``ToolsafeToolset(client)`` is a ``FunctionToolset`` with one tool per registered tool,
for any asyncio client (``AsyncClient`` in process, ``AsyncGatewayClient`` with an
agent key):

- each call is submitted under the operation_ref built from ``RunContext.tool_call_id``,
  the place of the model's response in the message history, and the conversation id
  (which Pydantic AI keeps on the message history, so a resumed run and a replay share
  it); a replayed call returns the stored envelope instead of writing again;
- a terminal step returns its envelope; a step toolsafe is still working on returns the
  in-progress answer. Neither raises a retry: toolsafe's own retries never double with
  Pydantic AI's;
- a step needing input raises ``ModelRetry`` with only the adapter's redacted agent text
  and the flagged fields; the model's next call of the tool, answering that retry
  prompt, is sent to ``provide_input`` under the same operation_ref;
- a step awaiting approval raises ``ApprovalRequired``: the run ends with
  ``DeferredToolRequests``; :meth:`ToolsafeToolset.approval_results` records each
  decision in toolsafe (approver, reason) and gives the ``DeferredToolResults`` to resume
  the run with.

The SDK-free pieces it builds on (the ``ToolDefinition`` objects and
:func:`~toolsafe.agents.pydantic_ai.pydantic_ai_ref`) are :mod:`toolsafe.agents.pydantic_ai`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai import ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    Tool,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.toolsets import FunctionToolset

from toolsafe.agents.pydantic_ai import pydantic_ai_ref, pydantic_ai_tool_definitions
from toolsafe.agents.shared import tool_for_name
from toolsafe.integrations import _calls
from toolsafe.integrations._calls import DEFAULT_WAIT, Turn
from toolsafe.recovery.store import StepNotFound
from toolsafe.tasks.calls import AsyncCalls
from toolsafe.tasks.views import StepView

REF_METADATA: Final = "operation_ref"


@dataclass(frozen=True)
class Decision:
    """An approver's decision on one deferred tool call."""

    approve: bool
    approver: str
    reason: str


class ToolsafeToolset(FunctionToolset[Any]):
    """The registered tools (or those named in ``tools``) as a Pydantic AI toolset."""

    def __init__(
        self,
        client: AsyncCalls,
        *,
        namespace: str | None = None,
        wait: float = DEFAULT_WAIT,
        tools: Iterable[str] | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.client = client
        self.namespace = namespace
        self.wait = wait
        registry = client.catalogue()
        wanted = set(tools) if tools is not None else set(registry.tools())
        for name in wanted:
            registry.get(name)  # an unknown tool fails here, naming the known ones
        # toolsafe tool -> the name the model calls it by
        self._names: dict[str, str] = {}
        for definition in pydantic_ai_tool_definitions(registry):
            tool = tool_for_name(registry, definition.name)
            if tool not in wanted:
                continue
            self._names[tool] = definition.name
            made = Tool.from_schema(
                self._function(tool),
                name=definition.name,
                description=definition.description,
                json_schema=definition.parameters_json_schema,
                takes_ctx=True,
            )
            # Pydantic AI counts the retries it asks of the model (input corrections here)
            # per tool; toolsafe's own limit on executions is the one that decides.
            limit = registry.get(tool).max_attempts
            if limit is not None:
                made.max_retries = limit
            self.add_tool(made)

    # ------------------------------------------------------------------ refs

    def operation_ref(self, ctx: RunContext[Any], tool_call_id: str) -> str:
        """The stable operation_ref of the tool call ``tool_call_id`` in this run's
        conversation: the conversation id (the run id when there is none) and the call id
        with the index of the model response that made it, so a model that numbers its
        calls per run still gets one ref per call."""
        scope = ctx.conversation_id or ctx.run_id
        if not scope:
            raise ValueError("the run has neither a conversation id nor a run id")
        index = _response_index(ctx.messages, tool_call_id)
        call = tool_call_id if index is None else f"{tool_call_id}-m{index}"
        return pydantic_ai_ref(call, scope, self.namespace)

    async def _ref_of(self, ctx: RunContext[Any], tool: str, tool_call_id: str) -> tuple[str, bool]:
        """The step this call belongs to, and whether it corrects that step: a call that
        answers toolsafe's retry prompt for an earlier call of the tool continues it."""
        earlier = _answered_retry(ctx.messages, self._names[tool], tool_call_id)
        if earlier is not None:
            ref, _ = await self._ref_of(ctx, tool, earlier)
            try:
                if (await self.client.view(ref)).tool == tool:
                    return ref, True
            except StepNotFound:
                pass  # the retry was for input refused before anything was stored
        return self.operation_ref(ctx, tool_call_id), False

    # ------------------------------------------------------------------ approvals

    async def approval_results(
        self, requests: DeferredToolRequests, decisions: Mapping[str, Decision]
    ) -> DeferredToolResults:
        """Record each decision (by ``tool_call_id``) in toolsafe, then give the results
        to resume the run with (``agent.run(..., deferred_tool_results=...)``). A
        rejected call's model answer is the failed step's envelope."""
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:
            decision = decisions.get(call.tool_call_id)
            if decision is None:
                continue
            ref = requests.metadata.get(call.tool_call_id, {}).get(REF_METADATA)
            if not isinstance(ref, str):
                raise ValueError(f"tool call {call.tool_call_id} is not a toolsafe step")
            if decision.approve:
                await self.client.approve(ref, decision.approver, decision.reason)
                approvals[call.tool_call_id] = ToolApproved()
            else:
                view = await self.client.reject(ref, decision.approver, decision.reason)
                answer = _calls.as_text(_calls.model_output(view))
                approvals[call.tool_call_id] = ToolDenied(answer)
        return DeferredToolResults(approvals=approvals)

    # ------------------------------------------------------------------ the tools

    def _function(self, tool: str) -> Any:
        async def call(ctx: RunContext[Any], **args: Any) -> dict[str, Any]:
            if ctx.tool_call_id is None:
                raise ValueError("Pydantic AI gave the tool no tool_call_id")
            ref, correcting = await self._ref_of(ctx, tool, ctx.tool_call_id)
            try:
                if correcting:
                    view = await _calls.correct(self.client, tool, ref, args, self.wait)
                else:
                    view = await _calls.submit_and_settle(self.client, tool, args, ref, self.wait)
            except _calls.EXPECTED as error:
                # Refused before anything was stored or sent: the model may correct it.
                raise ModelRetry(_calls.as_text(_calls.refusal_output(error, ref))) from None
            if ctx.tool_call_approved and _calls.turn_of(view) is Turn.AWAITING_APPROVAL:
                view = await self._approved_in_run(ctx, view)
            return self._answer(view, approved=ctx.tool_call_approved)

        call.__name__ = tool
        return call

    async def _approved_in_run(self, ctx: RunContext[Any], view: StepView) -> StepView:
        """Approved in the run's deferred results but not yet in toolsafe: recorded from
        the results' metadata (``approver``, ``reason``) when it names both."""
        metadata = ctx.tool_call_metadata if isinstance(ctx.tool_call_metadata, dict) else {}
        approver, reason = metadata.get("approver"), metadata.get("reason")
        if not isinstance(approver, str) or not isinstance(reason, str) or not approver:
            return view
        await self.client.approve(view.operation_ref, approver, reason)
        return await self.client.settle(view.operation_ref, self.wait)

    def _answer(self, view: StepView, *, approved: bool = False) -> dict[str, Any]:
        turn = _calls.turn_of(view)
        if turn is Turn.NEEDS_INPUT:
            raise ModelRetry(_calls.retry_prompt(view))
        if turn is Turn.AWAITING_APPROVAL and not approved:
            # Approved in the run but not in toolsafe, the model is given the envelope:
            # the step still waits for an approval toolsafe has recorded.
            raise ApprovalRequired(
                metadata={REF_METADATA: view.operation_ref, **_calls.approval_request(view)}
            )
        return _calls.model_output(view)


def _response_index(messages: list[Any], tool_call_id: str) -> int | None:
    """Where in the history the model response that made this call is."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse) and any(
            isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id
            for part in message.parts
        ):
            return index
    return None


def _is_retry(part: Any) -> bool:
    """A retry the model was asked for: a tool return marked ``retried`` (or the older
    ``RetryPromptPart``)."""
    if isinstance(part, ToolReturnPart):
        return part.outcome == "retried"
    return isinstance(part, RetryPromptPart)


def _answered_retry(messages: list[Any], tool: str, tool_call_id: str) -> str | None:
    """The earlier call of ``tool`` (the name the model calls it by) whose retry this
    call answers: the retries of the tool in the request just before the response that
    made this call, paired in order with the response's calls of the tool."""
    index = _response_index(messages, tool_call_id)
    if index is None or index == 0 or not isinstance(messages[index - 1], ModelRequest):
        return None
    prompts = [
        part.tool_call_id
        for part in messages[index - 1].parts
        if getattr(part, "tool_name", None) == tool and _is_retry(part)
    ]
    calls = [
        part.tool_call_id
        for part in messages[index].parts
        if isinstance(part, ToolCallPart) and part.tool_name == tool
    ]
    position = calls.index(tool_call_id)
    return prompts[position] if position < len(prompts) else None
