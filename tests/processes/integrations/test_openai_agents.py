"""The OpenAI Agents SDK integration against the real SDK, real workers and the example
downstream: a custom ``Model`` class plays the model from a script and records what it
was given. No network, no API key."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from tests.processes.integrations.conftest import Processes
from tests.support.lazy import lazy_module
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.openai import openai_ref
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound

if TYPE_CHECKING:
    from tests.support.integrations import openai_agents as kit
else:  # the SDK is imported by the worker that runs these tests, not by every collector
    kit = lazy_module("tests.support.integrations.openai_agents")

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_oa", "amount_cents": 1200, "currency": "EUR"}
RETRY_AFTER = 4  # seconds the downstream asks a rate-limited call to wait


def test_a_call_succeeds_and_a_replay_after_a_crash_writes_nothing_again(
    cluster: Cluster, processes: Processes
) -> None:
    def script() -> list[kit.Step]:
        return [
            lambda seen: [kit.call("create_invoice", INVOICE, "call_inv1")],
            lambda seen: [kit.say("Invoice created.")],
        ]

    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_1")
    ref = processes.scoped(tools.operation_ref("call_inv1"))
    model = kit.ScriptedModel(script())
    result = kit.run(kit.agent_with(tools, model), "Bill cus_oa 12 EUR")
    assert result.final_output == "Invoice created."
    first = kit.outputs(model.received[1])["call_inv1"]
    assert first["ok"] is True and first["operation_ref"] == ref
    assert first["result"]["amount_cents"] == 1200
    assert cluster.effects(ref) == 1

    # The process died before the answer was kept: a fresh client replays the same
    # history, the model issues the same call_id, and gets the stored envelope back.
    replay_tools = kit.ToolsafeTools(processes.aio("second"), scope="oa_run_1")
    made = replay_tools.operation_ref("call_inv1")
    assert made == tools.operation_ref("call_inv1") == openai_ref("call_inv1", "oa_run_1")
    replayed = kit.ScriptedModel(script())
    kit.run(kit.agent_with(replay_tools, replayed), "Bill cus_oa 12 EUR")
    assert kit.outputs(replayed.received[1])["call_inv1"] == first
    assert cluster.effects(ref) == 1
    submitted = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "submitted"]
    assert len(submitted) == 1


def test_needs_input_lets_the_model_correct_under_the_same_ref(
    cluster: Cluster, processes: Processes
) -> None:
    email = {"recipient_email": "ana@mail.invalid", "subject": "Your invoice"}

    def correct(seen: list[dict[str, Any]]) -> list[kit.TResponseOutputItem]:
        envelope = kit.outputs(seen)["call_em1"]
        fixed = {**email, "recipient_email": "ana@mail.example.org"}
        return [kit.call("send_email", {**fixed, "operation_ref": envelope["operation_ref"]},
                     "call_em2")]  # fmt: skip

    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_2")
    ref = processes.scoped(tools.operation_ref("call_em1"))
    model = kit.ScriptedModel(
        [lambda seen: [kit.call("send_email", email, "call_em1")], correct,
         lambda seen: [kit.say("Sent.")]]
    )  # fmt: skip
    kit.run(kit.agent_with(tools, model), "Mail ana")
    flagged = kit.outputs(model.received[1])["call_em1"]
    assert flagged["ok"] is False and flagged["next_action"] == "correct_input"
    assert flagged["operation_ref"] == ref
    corrected = kit.outputs(model.received[2])["call_em2"]
    assert corrected["ok"] is True and corrected["operation_ref"] == ref
    assert cluster.effects(ref) == 1
    assert cluster.effects(processes.scoped(tools.operation_ref("call_em2"))) == 0
    assert StepState.NEEDS_INPUT in cluster.states(ref)


def test_approval_interrupts_the_run_and_resumes_with_the_decision_recorded(
    cluster: Cluster, processes: Processes
) -> None:
    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_3")
    approved, rejected = (
        processes.scoped(tools.operation_ref(c)) for c in ("call_ap1", "call_ap2")
    )
    for ref in (approved, rejected):
        cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    big = {**INVOICE, "amount_cents": 990_000}
    model = kit.ScriptedModel(
        [lambda seen: [kit.call("create_invoice", big, "call_ap1"),
                       kit.call("create_invoice", {**big, "memo": "second"}, "call_ap2")],
         lambda seen: [kit.say("Done.")]]
    )  # fmt: skip
    agent = kit.agent_with(tools, model)
    result = kit.run(agent, "Bill big")
    assert {item.raw_item.call_id for item in result.interruptions} == {"call_ap1", "call_ap2"}
    assert len(model.received) == 1  # the run stopped for the approver
    assert cluster.effects(approved) == 0 and cluster.effects(rejected) == 0

    # The approver decides in another process: the run's state travels as JSON.
    saved = result.to_state().to_string()
    decider = kit.ToolsafeTools(processes.aio("second", approver=True), scope="oa_run_3")
    resumed_agent = kit.agent_with(decider, model)
    state = asyncio.run(kit.RunState.from_string(resumed_agent, saved))
    for item in state.get_interruptions():
        if getattr(item.raw_item, "call_id", None) == "call_ap1":
            asyncio.run(decider.approve(state, item, approver="alice", reason="confirmed"))
        else:
            asyncio.run(decider.reject(state, item, approver="alice", reason="duplicate"))
    resumed = kit.run(resumed_agent, state)
    assert resumed.final_output == "Done."
    answers = kit.outputs(model.received[1])
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
    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_4", wait=0.5)
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
    model = kit.ScriptedModel(
        [lambda seen: [kit.call("create_invoice", INVOICE, "call_rl1")],
         lambda seen: [kit.say("It will be retried.")]]
    )  # fmt: skip
    kit.run(kit.agent_with(tools, model), "Bill")
    answer = kit.outputs(model.received[1])["call_rl1"]
    assert answer["in_progress"] is True and answer["operation_ref"] == ref
    assert answer["state"] == "waiting_retry" and answer["not_before"]
    assert "ok" not in answer and "do not call it again" in answer["agent_message"]
    # toolsafe finishes the work by itself: one effect, later.
    cluster.wait_for(lambda: cluster.effects(ref) == 1, what="the retried write")


def test_input_refused_at_submit_is_answered_in_band_and_nothing_is_stored(
    cluster: Cluster, processes: Processes
) -> None:
    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_5")
    ref = processes.scoped(tools.operation_ref("call_bad1"))
    model = kit.ScriptedModel(
        [lambda seen: [kit.call("create_invoice", {**INVOICE, "currency": "eur"}, "call_bad1")],
         lambda seen: [kit.say("I will fix the currency.")]]
    )  # fmt: skip
    kit.run(kit.agent_with(tools, model), "Bill")
    answer = kit.outputs(model.received[1])["call_bad1"]
    assert answer["status"] == "refused" and answer["code"] == "INVALID_INPUT"
    assert answer["fields"] == ["currency"] and "nothing was sent" in answer["message"]
    with pytest.raises(StepNotFound):
        cluster.client.runtime.store.get(ref)
    assert cluster.effects(ref) == 0


def test_a_decision_an_operator_recorded_in_toolsafe_resumes_the_run(
    cluster: Cluster, processes: Processes
) -> None:
    tools = kit.ToolsafeTools(processes.aio("first"), scope="oa_run_6")
    ref = processes.scoped(tools.operation_ref("call_op1"))
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    model = kit.ScriptedModel(
        [
            lambda seen: [kit.call("create_invoice", INVOICE, "call_op1")],
            lambda seen: [kit.say("Ok.")],
        ]
    )
    agent = kit.agent_with(tools, model)
    result = kit.run(agent, "Bill")
    state = result.to_state()
    # Not approved yet: the interruption stays.
    assert len(asyncio.run(tools.apply_decisions(state))) == 1
    assert len(state.get_interruptions()) == 1
    cluster.client.approve(ref, approver="ops", reason="approved from the CLI")
    asyncio.run(tools.apply_decisions(state))
    kit.run(agent, state)
    answer = kit.outputs(model.received[1])["call_op1"]
    assert answer["ok"] is True and answer["operation_ref"] == ref
    assert cluster.effects(ref) == 1
