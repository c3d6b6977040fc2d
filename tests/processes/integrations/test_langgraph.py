"""The LangGraph tools in a real ``ToolNode`` graph with a real checkpointer
(``SqliteSaver`` on a file, opened afresh for each "process"), real workers and the
example downstream. The model is langchain-core's own ``GenericFakeChatModel``, scripted;
the agent node records what it was given. No network, no API key."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.processes.integrations.conftest import Processes
from tests.support.lazy import lazy_module
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.langgraph import langgraph_ref

if TYPE_CHECKING:
    from tests.support.integrations import langgraph as kit
else:  # the SDK is imported by the worker that runs these tests, not by every collector
    kit = lazy_module("tests.support.integrations.langgraph")

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_lg", "amount_cents": 450, "currency": "EUR"}


@pytest.fixture
def start(
    processes: Processes, tmp_path: Path
) -> Iterator[Callable[[str, list[kit.AIMessage]], kit.Process]]:
    """Start the agent process ``name`` (its own client and checkpointer connection,
    one checkpoint file per test) with the model's scripted replies."""
    started: list[kit.Process] = []

    def begin(name: str, replies: list[kit.AIMessage], approver: bool = False) -> kit.Process:
        client = processes.client(name, approver=approver)
        process = kit.Process(client, tmp_path / "checkpoints.db", replies)
        started.append(process)
        return process

    yield begin
    for process in started:
        process.close()


def test_a_graph_replayed_from_its_checkpoint_does_not_resubmit(
    cluster: Cluster, processes: Processes, start: Callable[[str, list[kit.AIMessage]], kit.Process]
) -> None:
    first = start("first", [kit.tool_call("create_invoice", INVOICE, "lg_inv1"),
                                  kit.AIMessage("Invoiced.")])  # fmt: skip
    first.graph.invoke({"messages": [kit.HumanMessage("Bill cus_lg")]}, kit.config("lg_t1"))
    ref = processes.scoped(langgraph_ref("lg_inv1", "lg_t1"))
    envelope, status = first.tool_answer("lg_inv1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1

    # Another process replays the thread from the checkpoint taken before the tool ran.
    second = start("second", [kit.AIMessage("Invoiced.")])
    [before_tools] = [
        snapshot
        for snapshot in second.graph.get_state_history(kit.config("lg_t1"))
        if snapshot.next == ("tools",)
    ]
    second.graph.invoke(None, before_tools.config)
    assert second.tool_answer("lg_inv1") == (envelope, "success")
    assert cluster.effects(ref) == 1
    submitted = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "submitted"]
    assert len(submitted) == 1


def test_approval_interrupts_and_command_resume_records_the_decision(
    cluster: Cluster, processes: Processes, start: Callable[..., kit.Process]
) -> None:
    ref = processes.scoped(langgraph_ref("lg_ap1", "lg_t2"))
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    first = start("first", [kit.tool_call("create_invoice", INVOICE, "lg_ap1")])
    paused = first.graph.invoke({"messages": [kit.HumanMessage("Bill")]}, kit.config("lg_t2"))
    [request] = paused["__interrupt__"]
    assert request.value["kind"] == "awaiting_approval"
    assert request.value["operation_ref"] == ref
    assert request.value["envelope"]["code"] == "MISSING_APPROVAL"
    assert cluster.effects(ref) == 0 and len(first.received) == 1

    # The approver answers later; a fresh process (the approver's) resumes the thread.
    second = start("second", [kit.AIMessage("Invoiced after approval.")], approver=True)
    decision = {"approve": True, "approver": "carol", "reason": "signed off"}
    done = second.graph.invoke(kit.Command(resume=decision), kit.config("lg_t2"))
    assert done["messages"][-1].content == "Invoiced after approval."
    envelope, status = second.tool_answer("lg_ap1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1
    approved = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "approved"]
    assert [e.detail["approver"] for e in approved] == [processes.recorded("carol")]


def test_needs_input_interrupts_and_the_corrected_input_keeps_the_ref(
    cluster: Cluster, processes: Processes, start: Callable[[str, list[kit.AIMessage]], kit.Process]
) -> None:
    email = {"recipient_email": "cy@mail.invalid", "subject": "Hello"}
    ref = processes.scoped(langgraph_ref("lg_em1", "lg_t3"))
    first = start("first", [kit.tool_call("send_email", email, "lg_em1")])
    paused = first.graph.invoke({"messages": [kit.HumanMessage("Mail cy")]}, kit.config("lg_t3"))
    [request] = paused["__interrupt__"]
    assert request.value["kind"] == "needs_input"
    assert request.value["fields"] == ["recipient_email"]
    assert "cy@mail.invalid" not in json.dumps(request.value)

    second = start("second", [kit.AIMessage("Sent.")])
    fixed = {"input": {"recipient_email": "cy@mail.example.org"}}
    second.graph.invoke(kit.Command(resume=fixed), kit.config("lg_t3"))
    envelope, status = second.tool_answer("lg_em1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1
