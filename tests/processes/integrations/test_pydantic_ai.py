"""The Pydantic AI toolset against the real SDK, real workers and the example downstream:
Pydantic AI's own ``FunctionModel`` plays the model from a script and records the
messages it was given. No network, no API key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from tests.processes.integrations.conftest import Processes
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.pydantic_ai import pydantic_ai_ref
from toolsafe.integrations.pydantic_ai import Decision, ToolsafeToolset
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_pa", "amount_cents": 700, "currency": "EUR"}
Step = Callable[[list[ModelMessage]], ModelResponse]


class Script:
    """A ``FunctionModel`` function: one scripted response per model request, recording
    the messages each request carried."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.received: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        return self.steps.pop(0)(messages)

    def last_parts(self, index: int) -> list[Any]:
        """The parts of the last request the model got on its ``index``-th call."""
        request = self.received[index][-1]
        assert isinstance(request, ModelRequest)
        return list(request.parts)


def calls(*parts: tuple[str, dict[str, Any], str]) -> Step:
    return lambda messages: ModelResponse(
        parts=[ToolCallPart(name, args, tool_call_id=call_id) for name, args, call_id in parts]
    )


def text(words: str) -> Step:
    return lambda messages: ModelResponse(parts=[TextPart(words)])


def _is_retry(part: Any) -> bool:
    """The retry the model was asked for (its return part marked ``retried``)."""
    if isinstance(part, ToolReturnPart):
        return part.outcome == "retried"
    return isinstance(part, RetryPromptPart)


def returned(parts: list[Any]) -> dict[str, Any]:
    return {
        part.tool_call_id: part.content
        for part in parts
        if isinstance(part, ToolReturnPart) and part.outcome == "success"
    }


def agent(toolset: ToolsafeToolset, script: Script) -> Agent[None, str | DeferredToolRequests]:
    return Agent(FunctionModel(script), toolsets=[toolset],
                 output_type=[str, DeferredToolRequests])  # fmt: skip


def test_a_call_succeeds_and_a_replay_after_a_crash_writes_nothing_again(
    cluster: Cluster, processes: Processes
) -> None:
    def script() -> Script:
        return Script([calls(("create_invoice", INVOICE, "pa_inv1")), text("Invoiced.")])

    first = script()
    result = asyncio.run(
        agent(ToolsafeToolset(processes.aio("first")), first).run(
            "Bill cus_pa", conversation_id="pa_conv1"
        )
    )
    assert result.output == "Invoiced."
    envelope = returned(first.last_parts(1))["pa_inv1"]
    # The first response of the history is message 1 (after the user prompt).
    ref = processes.scoped(pydantic_ai_ref("pa_inv1-m1", "pa_conv1"))
    assert envelope["ok"] is True and envelope["operation_ref"] == ref
    assert cluster.effects(ref) == 1

    # A fresh process replays the same conversation: same call id, same ref, the
    # stored envelope, no second write.
    again = script()
    asyncio.run(
        agent(ToolsafeToolset(processes.aio("second")), again).run(
            "Bill cus_pa", conversation_id="pa_conv1"
        )
    )
    assert returned(again.last_parts(1))["pa_inv1"] == envelope
    assert cluster.effects(ref) == 1


def test_needs_input_is_a_model_retry_and_the_correction_keeps_the_ref(
    cluster: Cluster, processes: Processes
) -> None:
    email = {"recipient_email": "bo@mail.invalid", "subject": "Receipt", "body": "b0dy-secret"}
    fixed = {**email, "recipient_email": "bo@mail.example.org"}
    script = Script(
        [calls(("send_email", email, "pa_em1")), calls(("send_email", fixed, "pa_em2")),
         text("Sent.")]
    )  # fmt: skip
    asyncio.run(
        agent(ToolsafeToolset(processes.aio("first")), script).run(
            "Mail bo", conversation_id="pa_c2"
        )
    )
    [retry] = [part for part in script.last_parts(1) if _is_retry(part)]
    assert retry.tool_call_id == "pa_em1" and isinstance(retry.content, str)
    # Only the safe agent text and the flagged fields: no input value reaches the model.
    assert "recipient_email" in retry.content
    assert "bo@mail.invalid" not in retry.content and "b0dy-secret" not in retry.content
    ref = processes.scoped(pydantic_ai_ref("pa_em1-m1", "pa_c2"))
    envelope = returned(script.last_parts(2))["pa_em2"]
    assert envelope["ok"] is True and envelope["operation_ref"] == ref
    assert cluster.effects(ref) == 1
    assert StepState.NEEDS_INPUT in cluster.states(ref)


def test_approval_defers_the_call_and_the_run_resumes_from_the_deferred_results(
    cluster: Cluster, processes: Processes
) -> None:
    approved = processes.scoped(pydantic_ai_ref("pa_ap1-m1", "pa_c3"))
    rejected = processes.scoped(pydantic_ai_ref("pa_ap2-m1", "pa_c3"))
    for ref in (approved, rejected):
        cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    script = Script(
        [calls(("create_invoice", INVOICE, "pa_ap1"),
               ("create_invoice", {**INVOICE, "memo": "again"}, "pa_ap2")),
         text("Done.")]
    )  # fmt: skip
    toolset = ToolsafeToolset(processes.aio("first"))
    result = asyncio.run(agent(toolset, script).run("Bill", conversation_id="pa_c3"))
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert {call.tool_call_id for call in requests.approvals} == {"pa_ap1", "pa_ap2"}
    assert requests.metadata["pa_ap1"]["operation_ref"] == approved
    assert len(script.received) == 1 and cluster.effects(approved) == 0

    # The decision comes later, in another process: the approver's.
    resumer = ToolsafeToolset(processes.aio("second", approver=True))
    results = asyncio.run(
        resumer.approval_results(
            requests,
            {"pa_ap1": Decision(True, "bob", "checked the order"),
             "pa_ap2": Decision(False, "bob", "a duplicate")},
        )
    )  # fmt: skip
    resumed = asyncio.run(
        agent(resumer, script).run(
            message_history=result.all_messages(), deferred_tool_results=results
        )
    )
    assert resumed.output == "Done."
    answers = returned(script.last_parts(1))
    assert answers["pa_ap1"]["ok"] is True and answers["pa_ap1"]["operation_ref"] == approved
    assert cluster.effects(approved) == 1 and cluster.effects(rejected) == 0
    denied = [p for p in script.last_parts(1) if getattr(p, "tool_call_id", "") == "pa_ap2"]
    assert denied and '"operation_ref":"' + rejected in str(denied[0].content)
    kinds = {e.kind: e.detail for e in cluster.client.runtime.store.events(approved)}
    assert kinds["approved"]["approver"] == processes.recorded("bob")


def test_a_step_being_verified_returns_in_progress_and_is_never_a_model_retry(
    cluster: Cluster, processes: Processes
) -> None:
    ref = processes.scoped(pydantic_ai_ref("pa_ver1-m1", "pa_c4"))
    # The write is stored, the answer lost (502), and the lookup is down: verifying.
    cluster.fault(fault="error_after_store", operation_ref=ref)
    cluster.fault(fault="lookup_down", operation_ref=ref, times=None)
    script = Script([calls(("create_invoice", INVOICE, "pa_ver1")), text("Waiting.")])
    toolset = ToolsafeToolset(processes.aio("first"), wait=0.5)
    asyncio.run(agent(toolset, script).run("Bill", conversation_id="pa_c4"))
    parts = script.last_parts(1)
    assert not [part for part in parts if _is_retry(part)]
    answer = returned(parts)["pa_ver1"]
    assert answer["in_progress"] is True and answer["operation_ref"] == ref
    assert answer["state"] in {"pending", "in_flight", "verifying"} and "ok" not in answer
    # The answer may have come before the worker's call reached the downstream (pending,
    # in flight): the write lands once, whenever it does.
    cluster.wait_for(lambda: cluster.effects(ref) >= 1, what=f"{ref}'s write stored")
    assert cluster.effects(ref) == 1
