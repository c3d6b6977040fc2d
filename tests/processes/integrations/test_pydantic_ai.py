"""The Pydantic AI toolset against the real SDK, real workers and the example downstream:
Pydantic AI's own ``FunctionModel`` plays the model from a script and records the
messages it was given. No network, no API key."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.processes.integrations.conftest import Processes
from tests.support.lazy import lazy_module
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.pydantic_ai import pydantic_ai_ref
from toolsafe.recovery.states import StepState

if TYPE_CHECKING:
    from tests.support.integrations import pydantic_ai as kit
else:  # the SDK is imported by the worker that runs these tests, not by every collector
    kit = lazy_module("tests.support.integrations.pydantic_ai")

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_pa", "amount_cents": 700, "currency": "EUR"}


def test_a_call_succeeds_and_a_replay_after_a_crash_writes_nothing_again(
    cluster: Cluster, processes: Processes
) -> None:
    def script() -> kit.Script:
        invoice = kit.calls(("create_invoice", INVOICE, "pa_inv1"))
        return kit.Script([invoice, kit.text("Invoiced.")])

    first = script()
    result = asyncio.run(
        kit.agent(kit.ToolsafeToolset(processes.aio("first")), first).run(
            "Bill cus_pa", conversation_id="pa_conv1"
        )
    )
    assert result.output == "Invoiced."
    envelope = kit.returned(first.last_parts(1))["pa_inv1"]
    # The first response of the history is message 1 (after the user prompt).
    ref = processes.scoped(pydantic_ai_ref("pa_inv1-m1", "pa_conv1"))
    assert envelope["ok"] is True and envelope["operation_ref"] == ref
    assert cluster.effects(ref) == 1

    # A fresh process replays the same conversation: same call id, same ref, the
    # stored envelope, no second write.
    again = script()
    asyncio.run(
        kit.agent(kit.ToolsafeToolset(processes.aio("second")), again).run(
            "Bill cus_pa", conversation_id="pa_conv1"
        )
    )
    assert kit.returned(again.last_parts(1))["pa_inv1"] == envelope
    assert cluster.effects(ref) == 1


def test_needs_input_is_a_model_retry_and_the_correction_keeps_the_ref(
    cluster: Cluster, processes: Processes
) -> None:
    email = {"recipient_email": "bo@mail.invalid", "subject": "Receipt", "body": "b0dy-secret"}
    fixed = {**email, "recipient_email": "bo@mail.example.org"}
    script = kit.Script(
        [kit.calls(("send_email", email, "pa_em1")), kit.calls(("send_email", fixed, "pa_em2")),
         kit.text("Sent.")]
    )  # fmt: skip
    asyncio.run(
        kit.agent(kit.ToolsafeToolset(processes.aio("first")), script).run(
            "Mail bo", conversation_id="pa_c2"
        )
    )
    [retry] = [part for part in script.last_parts(1) if kit.is_retry(part)]
    assert retry.tool_call_id == "pa_em1" and isinstance(retry.content, str)
    # Only the safe agent text and the flagged fields: no input value reaches the model.
    assert "recipient_email" in retry.content
    assert "bo@mail.invalid" not in retry.content and "b0dy-secret" not in retry.content
    ref = processes.scoped(pydantic_ai_ref("pa_em1-m1", "pa_c2"))
    envelope = kit.returned(script.last_parts(2))["pa_em2"]
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
    script = kit.Script(
        [kit.calls(("create_invoice", INVOICE, "pa_ap1"),
               ("create_invoice", {**INVOICE, "memo": "again"}, "pa_ap2")),
         kit.text("Done.")]
    )  # fmt: skip
    toolset = kit.ToolsafeToolset(processes.aio("first"))
    result = asyncio.run(kit.agent(toolset, script).run("Bill", conversation_id="pa_c3"))
    requests = result.output
    assert isinstance(requests, kit.DeferredToolRequests)
    assert {call.tool_call_id for call in requests.approvals} == {"pa_ap1", "pa_ap2"}
    assert requests.metadata["pa_ap1"]["operation_ref"] == approved
    assert len(script.received) == 1 and cluster.effects(approved) == 0

    # The decision comes later, in another process: the approver's.
    resumer = kit.ToolsafeToolset(processes.aio("second", approver=True))
    results = asyncio.run(
        resumer.approval_results(
            requests,
            {"pa_ap1": kit.Decision(True, "bob", "checked the order"),
             "pa_ap2": kit.Decision(False, "bob", "a duplicate")},
        )
    )  # fmt: skip
    resumed = asyncio.run(
        kit.agent(resumer, script).run(
            message_history=result.all_messages(), deferred_tool_results=results
        )
    )
    assert resumed.output == "Done."
    answers = kit.returned(script.last_parts(1))
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
    script = kit.Script([kit.calls(("create_invoice", INVOICE, "pa_ver1")), kit.text("Waiting.")])
    toolset = kit.ToolsafeToolset(processes.aio("first"), wait=0.5)
    asyncio.run(kit.agent(toolset, script).run("Bill", conversation_id="pa_c4"))
    parts = script.last_parts(1)
    assert not [part for part in parts if kit.is_retry(part)]
    answer = kit.returned(parts)["pa_ver1"]
    assert answer["in_progress"] is True and answer["operation_ref"] == ref
    assert answer["state"] in {"pending", "in_flight", "verifying"} and "ok" not in answer
    # The answer may have come before the worker's call reached the downstream (pending,
    # in flight): the write lands once, whenever it does.
    cluster.wait_for(lambda: cluster.effects(ref) >= 1, what=f"{ref}'s write stored")
    assert cluster.effects(ref) == 1
