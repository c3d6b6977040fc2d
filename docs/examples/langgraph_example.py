"""A LangGraph agent whose ToolNode runs toolsafe tools, with a checkpointer.

    python docs/examples/langgraph_example.py

The model is langchain-core's GenericFakeChatModel, scripted (no API key, no network):
it calls create_invoice once, then answers. With a real model, bind the tools to your
chat model (``model.bind_tools(tools)``) in the agent node instead.
"""

from __future__ import annotations

from typing import Any

from embedded import toolsafe_client
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from toolsafe import Client
from toolsafe.integrations.langgraph import toolsafe_tools

INVOICE = {"customer_id": "cus_7", "amount_cents": 990, "currency": "EUR"}


def main(client: Client) -> None:
    model = GenericFakeChatModel(messages=iter([
        AIMessage("", tool_calls=[{"name": "create_invoice", "args": INVOICE, "id": "c1"}]),
        AIMessage("Invoiced."),
    ]))  # fmt: skip

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(toolsafe_tools(client)))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=InMemorySaver())
    # The thread id scopes the refs: a thread resumed from its checkpoint does not resubmit.
    final = app.invoke({"messages": [HumanMessage("Bill cus_7 9.90 EUR")]},
                       {"configurable": {"thread_id": "thread_81"}})  # fmt: skip
    for message in final["messages"]:
        print(f"{message.type}: {message.content}")


if __name__ == "__main__":
    with toolsafe_client() as client:
        main(client)
