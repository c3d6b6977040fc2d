"""LangGraph's SDK-free piece: the operation_ref of a ``ToolCall``. The tools for a
``ToolNode`` (named by :func:`~toolsafe.agents.shared.plain_name`) and their
``ToolMessage`` answers are LangChain objects, so they live in the integration,
:mod:`toolsafe.integrations.langgraph` (extra ``langgraph``)."""

from __future__ import annotations

from toolsafe.agents.shared import operation_ref_for


def langgraph_ref(tool_call_id: str, thread_id: str, namespace: str | None = None) -> str:
    """LangGraph: the ``ToolCall``'s ``id``, scoped by the checkpointer's ``thread_id``
    (a graph resumed from its checkpoint replays the same message, so the same id)."""
    return operation_ref_for("langgraph", thread_id, tool_call_id, namespace)
