"""The OpenAI Agents SDK integration against the real SDK, real workers and the example
downstream: a custom ``Model`` class plays the model from a script and records what it
was given. No network, no API key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, RunState, Usage
from agents.items import TResponseOutputItem
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.processes.integrations.conftest import Processes
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.openai import openai_ref
from toolsafe.integrations.openai_agents import ToolsafeTools
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_oa", "amount_cents": 1200, "currency": "EUR"}
RETRY_AFTER = 4  # seconds the downstream asks a rate-limited call to wait
Step = Callable[[list[dict[str, Any]]], list[TResponseOutputItem]]


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """A model of the SDK's own kind: each turn answers from the script, given the
    input it received (recorded in ``received``)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.received: list[list[dict[str, Any]]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        items = [{"type": "message", "content": input}] if isinstance(input, str) else input
        seen = [dict(item) if isinstance(item, dict) else item.model_dump() for item in items]
        self.received.append(seen)
        output = self.steps.pop(0)(seen)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


def outputs(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The function_call_output items the model received, by call_id, parsed."""
    return {
        item["call_id"]: json.loads(item["output"])
        for item in items
        if item.get("type") == "function_call_output"
    }


def run(agent: Agent[Any], given: Any) -> Any:
    config = RunConfig(tracing_disabled=True)
    return asyncio.run(Runner.run(agent, given, run_config=config))


def agent_with(tools: ToolsafeTools, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="billing", instructions="Bill customers.", tools=tools.tools(),
                 model=model)  # fmt: skip


def test_a_call_succeeds_and_a_replay_after_a_crash_writes_nothing_again(
    cluster: Cluster, processes: Processes
) -> None:
    def script() -> list[Step]:
        return [
            lambda seen: [call("create_invoice", INVOICE, "call_inv1")],
            lambda seen: [say("Invoice created.")],
        ]

    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_1")
    ref = processes.scoped(tools.operation_ref("call_inv1"))
    model = ScriptedModel(script())
    result = run(agent_with(tools, model), "Bill cus_oa 12 EUR")
    assert result.final_output == "Invoice created."
    first = outputs(model.received[1])["call_inv1"]
    assert first["ok"] is True and first["operation_ref"] == ref
    assert first["result"]["amount_cents"] == 1200
    assert cluster.effects(ref) == 1

    # The process died before the answer was kept: a fresh client replays the same
    # history, the model issues the same call_id, and gets the stored envelope back.
    replay_tools = ToolsafeTools(processes.aio("second"), scope="oa_run_1")
    made = replay_tools.operation_ref("call_inv1")
    assert made == tools.operation_ref("call_inv1") == openai_ref("call_inv1", "oa_run_1")
    replayed = ScriptedModel(script())
    run(agent_with(replay_tools, replayed), "Bill cus_oa 12 EUR")
    assert outputs(replayed.received[1])["call_inv1"] == first
    assert cluster.effects(ref) == 1
    submitted = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "submitted"]
    assert len(submitted) == 1


def test_needs_input_lets_the_model_correct_under_the_same_ref(
    cluster: Cluster, processes: Processes
) -> None:
    email = {"recipient_email": "ana@mail.invalid", "subject": "Your invoice"}

    def correct(seen: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        envelope = outputs(seen)["call_em1"]
        fixed = {**email, "recipient_email": "ana@mail.example.org"}
        return [call("send_email", {**fixed, "operation_ref": envelope["operation_ref"]},
                     "call_em2")]  # fmt: skip

    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_2")
    ref = processes.scoped(tools.operation_ref("call_em1"))
    model = ScriptedModel(
        [lambda seen: [call("send_email", email, "call_em1")], correct,
         lambda seen: [say("Sent.")]]
    )  # fmt: skip
    run(agent_with(tools, model), "Mail ana")
    flagged = outputs(model.received[1])["call_em1"]
    assert flagged["ok"] is False and flagged["next_action"] == "correct_input"
    assert flagged["operation_ref"] == ref
    corrected = outputs(model.received[2])["call_em2"]
    assert corrected["ok"] is True and corrected["operation_ref"] == ref
    assert cluster.effects(ref) == 1
    assert cluster.effects(processes.scoped(tools.operation_ref("call_em2"))) == 0
    assert StepState.NEEDS_INPUT in cluster.states(ref)


def test_approval_interrupts_the_run_and_resumes_with_the_decision_recorded(
    cluster: Cluster, processes: Processes
) -> None:
    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_3")
    approved, rejected = (
        processes.scoped(tools.operation_ref(c)) for c in ("call_ap1", "call_ap2")
    )
    for ref in (approved, rejected):
        cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    big = {**INVOICE, "amount_cents": 990_000}
    model = ScriptedModel(
        [lambda seen: [call("create_invoice", big, "call_ap1"),
                       call("create_invoice", {**big, "memo": "second"}, "call_ap2")],
         lambda seen: [say("Done.")]]
    )  # fmt: skip
    agent = agent_with(tools, model)
    result = run(agent, "Bill big")
    assert {item.raw_item.call_id for item in result.interruptions} == {"call_ap1", "call_ap2"}
    assert len(model.received) == 1  # the run stopped for the approver
    assert cluster.effects(approved) == 0 and cluster.effects(rejected) == 0

    # The approver decides in another process: the run's state travels as JSON.
    saved = result.to_state().to_string()
    decider = ToolsafeTools(processes.aio("second", approver=True), scope="oa_run_3")
    resumed_agent = agent_with(decider, model)
    state = asyncio.run(RunState.from_string(resumed_agent, saved))
    for item in state.get_interruptions():
        if getattr(item.raw_item, "call_id", None) == "call_ap1":
            asyncio.run(decider.approve(state, item, approver="alice", reason="confirmed"))
        else:
            asyncio.run(decider.reject(state, item, approver="alice", reason="duplicate"))
    resumed = run(resumed_agent, state)
    assert resumed.final_output == "Done."
    answers = outputs(model.received[1])
    assert answers["call_ap1"]["ok"] is True and answers["call_ap1"]["operation_ref"] == approved
    assert answers["call_ap2"]["ok"] is False and answers["call_ap2"]["operation_ref"] == rejected
    assert cluster.effects(approved) == 1 and cluster.effects(rejected) == 0
    store = cluster.client.runtime.store
    decisions = {e.kind: e.detail for ref in (approved, rejected) for e in store.events(ref)}
    assert decisions["approved"]["approver"] == processes.recorded("alice")
    assert decisions["rejected"]["reason"] == "duplicate"


def test_a_step_still_waiting_to_retry_is_reported_in_progress_not_as_an_error(
    cluster: Cluster, processes: Processes
) -> None:
    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_4", wait=0.5)
    ref = processes.scoped(tools.operation_ref("call_rl1"))
    cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=RETRY_AFTER)
    # The call is made once already and waiting to retry when the agent's tool asks (its
    # submit is a repeat, R2), so what the tool answers does not hang on how soon a
    # loaded worker made the first attempt: the retry is seconds away, the answer 0.5 s.
    processes.local("first").submit("create_invoice", INVOICE, ref)
    store = cluster.client.runtime.store
    cluster.wait_for(
        lambda: store.get(ref).state is StepState.WAITING_RETRY, what="the rate-limited attempt"
    )
    model = ScriptedModel(
        [lambda seen: [call("create_invoice", INVOICE, "call_rl1")],
         lambda seen: [say("It will be retried.")]]
    )  # fmt: skip
    run(agent_with(tools, model), "Bill")
    answer = outputs(model.received[1])["call_rl1"]
    assert answer["in_progress"] is True and answer["operation_ref"] == ref
    assert answer["state"] == "waiting_retry" and answer["not_before"]
    assert "ok" not in answer and "do not call it again" in answer["agent_message"]
    # toolsafe finishes the work by itself: one effect, later.
    cluster.wait_for(lambda: cluster.effects(ref) == 1, what="the retried write")


def test_input_refused_at_submit_is_answered_in_band_and_nothing_is_stored(
    cluster: Cluster, processes: Processes
) -> None:
    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_5")
    ref = processes.scoped(tools.operation_ref("call_bad1"))
    model = ScriptedModel(
        [lambda seen: [call("create_invoice", {**INVOICE, "currency": "eur"}, "call_bad1")],
         lambda seen: [say("I will fix the currency.")]]
    )  # fmt: skip
    run(agent_with(tools, model), "Bill")
    answer = outputs(model.received[1])["call_bad1"]
    assert answer["status"] == "refused" and answer["code"] == "INVALID_INPUT"
    assert answer["fields"] == ["currency"] and "nothing was sent" in answer["message"]
    with pytest.raises(StepNotFound):
        cluster.client.runtime.store.get(ref)
    assert cluster.effects(ref) == 0


def test_a_decision_an_operator_recorded_in_toolsafe_resumes_the_run(
    cluster: Cluster, processes: Processes
) -> None:
    tools = ToolsafeTools(processes.aio("first"), scope="oa_run_6")
    ref = processes.scoped(tools.operation_ref("call_op1"))
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    model = ScriptedModel(
        [lambda seen: [call("create_invoice", INVOICE, "call_op1")], lambda seen: [say("Ok.")]]
    )
    agent = agent_with(tools, model)
    result = run(agent, "Bill")
    state = result.to_state()
    # Not approved yet: the interruption stays.
    assert len(asyncio.run(tools.apply_decisions(state))) == 1
    assert len(state.get_interruptions()) == 1
    cluster.client.approve(ref, approver="ops", reason="approved from the CLI")
    asyncio.run(tools.apply_decisions(state))
    run(agent, state)
    answer = outputs(model.received[1])["call_op1"]
    assert answer["ok"] is True and answer["operation_ref"] == ref
    assert cluster.effects(ref) == 1
