"""The tasks extension for the SDK's clients, for hosts that talk to ``toolsafe mcp``
(and for toolsafe's tests). The simplest is the SDK's own ``Client``, which follows a
task inside ``call_tool`` and returns the final ``CallToolResult``:

    async with Client(server, extensions=[ToolsafeTasks()]) as client:   # mode="auto"
        result = await client.call_tool(name, arguments)

On a ``ClientSession``, declare it with :func:`tasks_session_options`, speak the
2026-07-28 protocol (``discover()``, or ``adopt`` a known ``DiscoverResult``), take the
task with ``allow_claimed=True`` and follow it with :func:`get_task`:

    session = ClientSession(read, write, **tasks_session_options())
    await session.discover()
    answer = await session.call_tool(name, arguments, allow_claimed=True)
    if isinstance(answer, CreateTaskResult): task = await get_task(session, answer.task_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, EmptyResult, Request

from toolsafe.mcp.tasks import (
    EXTENSION,
    META_RESULT,
    POLL_MS,
    CreateTaskResult,
    GetTaskResult,
    TaskParams,
)


class GetTaskRequest(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class CancelTaskRequest(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class UpdateTaskRequest(Request[TaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


async def get_task(session: ClientSession, task_id: str) -> GetTaskResult:
    return await session.send_request(
        GetTaskRequest(params=TaskParams(task_id=task_id)), GetTaskResult
    )


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """Ask toolsafe to cancel the step (acknowledged; cooperative, as the extension has
    it): ``get_task`` then says what became of it."""
    await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), EmptyResult)


async def update_task(session: ClientSession, task_id: str) -> None:
    """``tasks/update``: acknowledged for a task toolsafe knows, and nothing changes —
    toolsafe asks for no input through the task (a correction is a ``tools/call`` under
    the same ref, an approval a person's decision)."""
    await session.send_request(UpdateTaskRequest(params=TaskParams(task_id=task_id)), EmptyResult)


def answer_of(task: GetTaskResult) -> CallToolResult | None:
    """The step's ``CallToolResult`` once the task completed, needs input or was
    cancelled, else None."""
    if task.status == "completed" and task.result is not None:
        return CallToolResult.model_validate(task.result)
    carried = (task.meta or {}).get(META_RESULT)
    if task.status in ("input_required", "cancelled") and isinstance(carried, dict):
        return CallToolResult.model_validate(carried)
    return None


async def _follow(created: CreateTaskResult, context: ClaimContext) -> CallToolResult:
    while True:
        task = await get_task(context.session, created.task_id)
        answer = answer_of(task)
        if answer is not None:
            return answer
        await anyio.sleep((task.poll_interval_ms or POLL_MS) / 1000)


def tasks_claim() -> ResultClaim[CreateTaskResult]:
    return ResultClaim(result_type="task", model=CreateTaskResult, resolve=_follow)


def tasks_session_options() -> dict[str, Any]:
    """``ClientSession(**...)`` keywords that declare the tasks extension."""
    return {"extensions": {EXTENSION: {}}, "result_claims": {EXTENSION: [tasks_claim()]}}


class ToolsafeTasks(ClientExtension):
    """The tasks extension for ``mcp.client.Client(extensions=[...])``."""

    identifier = EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (tasks_claim(),)
