"""LangGraph's side of tests/processes/integrations/test_langgraph.py: one agent
process's graph (a scripted chat model of LangChain's own kind, toolsafe's tools in a
``ToolNode``, a SQLite checkpointer) and the messages it plays."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from toolsafe.integrations.langgraph import toolsafe_tools
from toolsafe.tasks.calls import Calls

__all__ = ["AIMessage", "Command", "HumanMessage", "Process"]


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


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}
