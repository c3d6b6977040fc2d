"""The LangGraph tools in a real ``ToolNode`` graph with a real checkpointer
(``SqliteSaver`` on a file, opened afresh for each "process"), real workers and the
example downstream. The model is langchain-core's own ``GenericFakeChatModel``, scripted;
the agent node records what it was given. No network, no API key."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from tests.processes.integrations.conftest import Processes
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.langgraph import langgraph_ref
from toolsafe.integrations.langgraph import toolsafe_tools
from toolsafe.tasks.calls import Calls

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_lg", "amount_cents": 450, "currency": "EUR"}


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


class Process:
    """What one agent process holds: a client, a checkpointer connection, the graph."""

    def __init__(self, client: Calls, path: Path, replies: list[AIMessage]) -> None:
        self.client = client
        self.connection = sqlite3.connect(path, check_same_thread=False)
        self.received: list[list[BaseMessage]] = []
        model = GenericFakeChatModel(messages=iter(replies))

        def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            self.received.append(list(state["messages"]))
            return {"messages": [model.invoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode(toolsafe_tools(self.client, wait=20)))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        self.graph: CompiledStateGraph[Any, Any, Any, Any] = graph.compile(
            checkpointer=SqliteSaver(self.connection)
        )

    def close(self) -> None:
        self.connection.close()

    def tool_answer(self, call_id: str) -> tuple[dict[str, Any], str]:
        """The tool message the model last received for ``call_id``: content, status."""
        for message in reversed(self.received[-1]):
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                assert isinstance(message.content, str)
                return json.loads(message.content), message.status
        raise AssertionError(f"the model received no answer for {call_id}")


@pytest.fixture
def start(
    processes: Processes, tmp_path: Path
) -> Iterator[Callable[[str, list[AIMessage]], Process]]:
    """Start the agent process ``name`` (its own client and checkpointer connection,
    one checkpoint file per test) with the model's scripted replies."""
    started: list[Process] = []

    def begin(name: str, replies: list[AIMessage], approver: bool = False) -> Process:
        client = processes.client(name, approver=approver)
        process = Process(client, tmp_path / "checkpoints.db", replies)
        started.append(process)
        return process

    yield begin
    for process in started:
        process.close()


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def test_a_graph_replayed_from_its_checkpoint_does_not_resubmit(
    cluster: Cluster, processes: Processes, start: Callable[[str, list[AIMessage]], Process]
) -> None:
    first = start("first", [tool_call("create_invoice", INVOICE, "lg_inv1"),
                                  AIMessage("Invoiced.")])  # fmt: skip
    first.graph.invoke({"messages": [HumanMessage("Bill cus_lg")]}, config("lg_t1"))
    ref = processes.scoped(langgraph_ref("lg_inv1", "lg_t1"))
    envelope, status = first.tool_answer("lg_inv1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1

    # Another process replays the thread from the checkpoint taken before the tool ran.
    second = start("second", [AIMessage("Invoiced.")])
    [before_tools] = [
        snapshot
        for snapshot in second.graph.get_state_history(config("lg_t1"))
        if snapshot.next == ("tools",)
    ]
    second.graph.invoke(None, before_tools.config)
    assert second.tool_answer("lg_inv1") == (envelope, "success")
    assert cluster.effects(ref) == 1
    submitted = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "submitted"]
    assert len(submitted) == 1


def test_approval_interrupts_and_command_resume_records_the_decision(
    cluster: Cluster, processes: Processes, start: Callable[..., Process]
) -> None:
    ref = processes.scoped(langgraph_ref("lg_ap1", "lg_t2"))
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    first = start("first", [tool_call("create_invoice", INVOICE, "lg_ap1")])
    paused = first.graph.invoke({"messages": [HumanMessage("Bill")]}, config("lg_t2"))
    [request] = paused["__interrupt__"]
    assert request.value["kind"] == "awaiting_approval"
    assert request.value["operation_ref"] == ref
    assert request.value["envelope"]["code"] == "MISSING_APPROVAL"
    assert cluster.effects(ref) == 0 and len(first.received) == 1

    # The approver answers later; a fresh process (the approver's) resumes the thread.
    second = start("second", [AIMessage("Invoiced after approval.")], approver=True)
    decision = {"approve": True, "approver": "carol", "reason": "signed off"}
    done = second.graph.invoke(Command(resume=decision), config("lg_t2"))
    assert done["messages"][-1].content == "Invoiced after approval."
    envelope, status = second.tool_answer("lg_ap1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1
    approved = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "approved"]
    assert [e.detail["approver"] for e in approved] == [processes.recorded("carol")]


def test_needs_input_interrupts_and_the_corrected_input_keeps_the_ref(
    cluster: Cluster, processes: Processes, start: Callable[[str, list[AIMessage]], Process]
) -> None:
    email = {"recipient_email": "cy@mail.invalid", "subject": "Hello"}
    ref = processes.scoped(langgraph_ref("lg_em1", "lg_t3"))
    first = start("first", [tool_call("send_email", email, "lg_em1")])
    paused = first.graph.invoke({"messages": [HumanMessage("Mail cy")]}, config("lg_t3"))
    [request] = paused["__interrupt__"]
    assert request.value["kind"] == "needs_input"
    assert request.value["fields"] == ["recipient_email"]
    assert "cy@mail.invalid" not in json.dumps(request.value)

    second = start("second", [AIMessage("Sent.")])
    fixed = {"input": {"recipient_email": "cy@mail.example.org"}}
    second.graph.invoke(Command(resume=fixed), config("lg_t3"))
    envelope, status = second.tool_answer("lg_em1")
    assert envelope["ok"] is True and envelope["operation_ref"] == ref and status == "success"
    assert cluster.effects(ref) == 1
