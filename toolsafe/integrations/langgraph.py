"""toolsafe tools for LangGraph (``pip install 'toolsafe[langgraph]'``).

``toolsafe_tools(client)`` gives one LangChain tool per registered tool, for a
``ToolNode``, for any synchronous client (``Client`` in process, ``GatewayClient`` with
an agent key):

- each call is submitted under the operation_ref built from the ``ToolCall``'s id and
  the checkpointer's ``thread_id`` (``config["configurable"]["thread_id"]``): a graph
  resumed or replayed from a checkpoint re-runs the tool node with the same message, so
  the same ref, and gets the stored step back instead of writing again;
- a step awaiting approval calls ``interrupt()`` with what the approver needs; resume
  with ``Command(resume={"approve": True, "approver": "...", "reason": "..."})`` and the
  decision is recorded in toolsafe;
- a step needing input calls ``interrupt()`` with the flagged fields; resume with
  ``Command(resume={"input": {field: corrected value}})`` and the corrected input goes
  to ``provide_input`` under the same ref;
- the tool's answer is a ``ToolMessage`` holding the envelope (``status="error"`` when
  ``ok`` is false), or the in-progress answer for a step toolsafe is still working on.

LangGraph re-runs a node from its start on every resume and hands the resume values to
its ``interrupt()`` calls in order, so the tool replays one ``interrupt()`` for every
episode of input or approval the step already went through (the store's history says
how many) before it asks about the current one.

The SDK-free piece it builds on, :func:`~toolsafe.agents.langgraph.langgraph_ref`, is in
:mod:`toolsafe.agents.langgraph`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict

from toolsafe.agents.langgraph import langgraph_ref
from toolsafe.agents.shared import plain_name
from toolsafe.integrations import _calls
from toolsafe.integrations._calls import DEFAULT_WAIT, Turn
from toolsafe.recovery.states import WAITING_ON_HUMAN
from toolsafe.tasks.calls import Calls
from toolsafe.tasks.views import StepView

CALL_ID: Final = "tool_call_id"


class _Arguments(BaseModel):
    """What LangChain validates a call against: the tool's own input passes as it came
    (toolsafe checks it against the tool's schema on submit), plus the call id LangChain
    injects (the model never sees it)."""

    model_config = ConfigDict(extra="allow")

    tool_call_id: Annotated[str, InjectedToolCallId]


class ToolsafeTool(BaseTool):
    """One registered tool as a LangChain tool that runs through toolsafe."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Calls
    tool: str
    arguments_schema: dict[str, Any]
    namespace: str | None = None
    wait: float = DEFAULT_WAIT

    @property
    def tool_call_schema(self) -> dict[str, Any]:
        """What the model is offered: the tool's input schema (from the catalogue)."""
        return {**self.arguments_schema, "description": self.description}

    def operation_ref(self, tool_call_id: str, thread_id: str) -> str:
        return langgraph_ref(tool_call_id, thread_id, self.namespace)

    def _run(self, config: RunnableConfig, **kwargs: Any) -> ToolMessage:
        call_id = kwargs.pop(CALL_ID)
        thread = (config.get("configurable") or {}).get("thread_id")
        if not isinstance(thread, str) or not thread:
            raise ValueError(
                f"{self.name} needs the graph's thread_id (config['configurable']"
                "['thread_id'], with a checkpointer): the operation_ref is built from it"
            )
        ref = self.operation_ref(call_id, thread)
        payload = dict(kwargs)
        try:
            view = _calls.submit_and_settle_sync(self.client, self.tool, payload, ref, self.wait)
            # The episodes this step already went through were answered by earlier
            # resumes: replay their interrupts, so the current one gets its own value.
            # (A step answered elsewhere before this node ever asked, e.g. by an operator,
            # pauses once more with this payload; resume it with anything.)
            for _ in range(_answered(self.client.view(ref))):
                interrupt({"kind": "answered", "operation_ref": ref, "tool": self.tool})
            while (turn := _calls.turn_of(view)) in (Turn.NEEDS_INPUT, Turn.AWAITING_APPROVAL):
                if turn is Turn.NEEDS_INPUT:
                    answer = interrupt(_calls.input_request(view))
                    view = self._correct(ref, payload, answer)
                else:
                    answer = interrupt(_calls.approval_request(view))
                    view = self._decide(ref, answer)
        except _calls.EXPECTED as error:
            return _message(_calls.refusal_output(error, ref), call_id, error=True)
        output = _calls.model_output(view)
        return _message(output, call_id, error=output.get("ok") is False)

    def _correct(self, ref: str, payload: Mapping[str, Any], answer: object) -> StepView:
        fields = answer.get("input") if isinstance(answer, Mapping) else None
        if not isinstance(fields, Mapping):
            raise ValueError(
                f"resume {self.name}'s input request with "
                "Command(resume={'input': {field: corrected value}})"
            )
        self.client.provide_input(ref, {**payload, **fields})
        return self.client.settle(ref, self.wait)

    def _decide(self, ref: str, answer: object) -> StepView:
        approve = answer.get("approve") if isinstance(answer, Mapping) else None
        approver = answer.get("approver") if isinstance(answer, Mapping) else None
        reason = answer.get("reason") if isinstance(answer, Mapping) else None
        if not isinstance(approve, bool) or not approver or not reason:
            raise ValueError(
                f"resume {self.name}'s approval request with Command(resume={{'approve': "
                "True or False, 'approver': who, 'reason': why}})"
            )
        if approve:
            self.client.approve(ref, str(approver), str(reason))
            return self.client.settle(ref, self.wait)
        return self.client.reject(ref, str(approver), str(reason))


def toolsafe_tools(
    client: Calls,
    *,
    namespace: str | None = None,
    wait: float = DEFAULT_WAIT,
    tools: Iterable[str] | None = None,
) -> list[BaseTool]:
    """The registered tools (or those named) as LangChain tools for a ``ToolNode``."""
    registry = client.catalogue()
    names = tuple(tools) if tools is not None else registry.tools()
    made: list[BaseTool] = []
    for tool in names:
        spec = registry.get(tool)
        made.append(
            ToolsafeTool(
                name=plain_name(tool),
                description=spec.description,
                args_schema=_Arguments,
                client=client,
                tool=tool,
                arguments_schema=dict(spec.input_schema),
                namespace=namespace,
                wait=wait,
            )
        )
    return made


def _answered(view: StepView) -> int:
    """How many times the step left needs input or awaiting approval."""
    waiting = {str(state) for state in WAITING_ON_HUMAN}
    return sum(
        1
        for entry in view.history
        if entry.from_state in waiting and entry.to_state and entry.to_state != entry.from_state
    )


def _message(output: Mapping[str, Any], call_id: str, *, error: bool) -> ToolMessage:
    return ToolMessage(
        content=_calls.as_text(output), tool_call_id=call_id, status="error" if error else "success"
    )
