"""MCP tasks as the pinned SDK carries them: the ``io.modelcontextprotocol/tasks``
extension of the 2026-07-28 protocol (SEP-2663). The SDK ships the extension points
(per-request client capabilities, extension result types, custom methods) and no task
store; toolsafe's step store is the store. The task id is the operation_ref, so a task
outlives the server process that created it.

Status: pending, in flight, waiting to retry, verifying → ``working`` (the status
message says which, and when the next attempt is due); needs input, awaiting approval
→ ``input_required``; succeeded → ``completed``; failed, escalated, cancelled →
``completed`` with an error result (``isError``). The task's result is the step's
``CallToolResult``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, Literal

from mcp_types import CLIENT_CAPABILITIES_META_KEY, RequestParams, Result
from pydantic import Field

from toolsafe.mcp.results import call_tool_result
from toolsafe.recovery.states import TERMINAL, WAITING_ON_HUMAN, StepState
from toolsafe.tasks.views import StepView

EXTENSION: Final = "io.modelcontextprotocol/tasks"
# Where an input_required task carries the step's CallToolResult (docs/mcp.md).
META_RESULT: Final = "toolsafe/result"
POLL_MS: Final = 1000
MAX_POLL_MS: Final = 60_000

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class TaskFields(Result):
    """The fields every task message carries (SEP-2663 ``Task``)."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_seconds: int | None = None
    poll_interval_milliseconds: int | None = None


class CreateTaskResult(TaskFields):
    """The answer to a ``tools/call`` that became a task (``resultType: "task"``)."""

    result_type: Literal["task"] = "task"


class GetTaskResult(TaskFields):
    """``tasks/get``: the task with its result once completed (or its input requests)."""

    result_type: Literal["complete"] = "complete"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class TaskParams(RequestParams):
    """Params of ``tasks/get``, ``tasks/update`` and ``tasks/cancel``."""

    task_id: str = Field(min_length=1)
    request_state: str | None = None
    input_responses: dict[str, Any] | None = None


def wants_tasks(meta: Any) -> bool:
    """Whether this request's client declared the tasks extension (per request, 2026)."""
    if not isinstance(meta, dict):
        return False
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


def task_status(state: StepState) -> TaskStatus:
    if state in WAITING_ON_HUMAN:
        return "input_required"
    if state in TERMINAL:
        return "completed"
    return "working"


def _stamp(value: datetime | None, fallback: datetime) -> str:
    return (value or fallback).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _poll_ms(view: StepView, now: datetime) -> int:
    if view.state is StepState.WAITING_RETRY and view.due_at is not None:
        due = int((view.due_at - now).total_seconds() * 1000)
        return max(POLL_MS, min(due, MAX_POLL_MS))
    return POLL_MS


def _fields(view: StepView, now: datetime) -> dict[str, Any]:
    first = view.history[0].at if view.history else None
    last = view.history[-1].at if view.history else None
    return {
        "task_id": view.operation_ref,
        "status": task_status(view.state),
        "status_message": view.text,
        "created_at": _stamp(first, now),
        "last_updated_at": _stamp(last, now),
        "ttl_seconds": None,  # kept until an operator purges terminal steps
        "poll_interval_milliseconds": None if view.terminal else _poll_ms(view, now),
    }


def created(view: StepView, now: datetime) -> CreateTaskResult:
    return CreateTaskResult(**_fields(view, now))


def detailed(view: StepView, now: datetime) -> GetTaskResult:
    """``tasks/get`` for a step as it is now."""
    task = GetTaskResult(**_fields(view, now))
    answer = call_tool_result(view).model_dump(by_alias=True, mode="json", exclude_none=True)
    if task.status == "completed":
        task.result = answer
    elif task.status == "input_required":
        # What the step waits for is a corrected tools/call under the same ref (needs
        # input) or a human approver (awaiting approval): no request for the client to
        # answer in tasks/update. The status message says what to do, and the step's
        # answer (its envelope, the flagged fields) rides in _meta.
        task.input_requests = {}
        task.meta = {**(task.meta or {}), META_RESULT: answer}
    return task
