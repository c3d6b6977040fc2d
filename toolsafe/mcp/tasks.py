"""MCP tasks as the 2026-07-28 protocol has them: the ``io.modelcontextprotocol/tasks``
extension (SEP-2663). The pinned SDK ships the extension points (per-request client
capabilities, extension result types, custom methods) and no task store; toolsafe's
step store is the store. The task id is the operation_ref, so a task outlives the
server process that created it.

Status: pending, in flight, waiting to retry, verifying → ``working`` (the status
message says which, and when the next attempt is due); needs input, awaiting approval
→ ``input_required``; succeeded, failed, escalated → ``completed`` (an error result,
``isError``, for the last two: a tool error is never the task status ``failed``, which
the extension keeps for JSON-RPC errors); cancelled → ``cancelled``. The task's result
is the step's ``CallToolResult``. ``ttlMs`` is null (a step stays until it is purged).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, Literal

from mcp_types import CLIENT_CAPABILITIES_META_KEY, RequestParams, Result
from pydantic import Field

from toolsafe.mcp.results import call_tool_result
from toolsafe.recovery.states import TERMINAL, WAITING_ON_HUMAN, StepState
from toolsafe.recovery.store.actions import CANCEL_REQUESTED
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
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None

    def wire(self) -> dict[str, Any]:
        """The message as sent: ``ttlMs`` is required and null means unlimited, so it
        stays when the rest of the ``None`` fields are left out."""
        dumped = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        dumped["ttlMs"] = self.ttl_ms
        return dumped


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
    if state is StepState.CANCELLED:
        return "cancelled"
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
        "ttl_ms": None,  # kept until an operator purges terminal steps
        "poll_interval_ms": None if view.terminal else _poll_ms(view, now),
    }


def cancel_note(view: StepView) -> str | None:
    """The status message of a step with a cancellation asked for and not yet taken
    (``tasks/cancel`` while it ran or its outcome was unknown), else None."""
    if view.terminal:
        return None
    asked = None
    for entry in view.history:
        if entry.kind == CANCEL_REQUESTED:
            asked = entry
        elif entry.kind == "resolved":
            asked = None
    if asked is None:
        return None
    return (
        f"{view.text} Cancellation requested at {_stamp(asked.at, asked.at)}: it takes "
        "effect once the step waits with nothing written; a write the verification "
        "finds stays a success."
    )


def created(view: StepView, now: datetime) -> CreateTaskResult:
    return CreateTaskResult(**_fields(view, now))


def detailed(view: StepView, now: datetime, status_message: str | None = None) -> GetTaskResult:
    """``tasks/get`` for a step as it is now (``status_message`` in place of the view's
    text when given)."""
    task = GetTaskResult(**_fields(view, now))
    if status_message is not None:
        task.status_message = status_message
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
    elif task.status == "cancelled":
        # A cancelled task has no result in the extension; the step's answer (the
        # runtime's CANCELLED envelope: nothing was written) rides in _meta.
        task.meta = {**(task.meta or {}), META_RESULT: answer}
    return task
