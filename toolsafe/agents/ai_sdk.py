"""The Vercel AI SDK's Python piece: the operation_ref rule, for a Python service that
submits or looks up the calls of a TypeScript agent. The tools, the approvals and the
answers live in ``@toolsafe/client`` (clients/typescript, ``src/ai-sdk.ts``:
``toolsafeTools``; ``src/refs.ts``: ``aiSdkRef``)."""

from __future__ import annotations

from toolsafe.agents.shared import operation_ref_for


def ai_sdk_ref(tool_call_id: str, run_id: str, namespace: str | None = None) -> str:
    """The Vercel AI SDK (TypeScript): the ``toolCallId`` its ``execute`` and approval
    functions are given, scoped by the run or conversation id the application keeps
    across a replay. ``@toolsafe/client``'s ``aiSdkRef`` (clients/typescript) is the
    same rule; the two are checked against each other."""
    return operation_ref_for("ai_sdk", run_id, tool_call_id, namespace)
