"""The MCP server's handlers, on the SDK's low-level ``Server``: ``tools/list`` from the
registry, ``tools/call`` through the step store, and the tasks extension's
``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (``toolsafe.mcp.tasks``).

Transport-free: ``toolsafe mcp`` serves it over stdio, the gateway over streamable
HTTP, each telling it who calls (``namespace_of``) so refs stay inside a key's
namespace.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    ListToolsResult,
    PaginatedRequestParams,
    Tool,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolsafe import tracing
from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.adapters.errors import InvalidInput, UnknownToolError
from toolsafe.agents.mcp import mcp_ref, mcp_tools
from toolsafe.mcp import tasks
from toolsafe.mcp.failures import StoreFailures
from toolsafe.mcp.results import call_tool_result, refusal_result
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.tasks.calls import AsyncCalls
from toolsafe.tasks.runtime import utcnow
from toolsafe.tasks.views import StepView

log = logging.getLogger("toolsafe.mcp")


def _version() -> str:
    try:
        return version("toolsafe")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0+unknown"


# tasks/get, tasks/update and tasks/cancel for a task id that names no step: the
# extension's invalid-params error.
TASK_NOT_FOUND: Final = INVALID_PARAMS
NEEDS_TASKS: Final[dict[str, Any]] = {"requiredCapabilities": {"extensions": {tasks.EXTENSION: {}}}}

NamespaceOf = Callable[[ServerRequestContext[Any, Any]], str | None]
ActorOf = Callable[[ServerRequestContext[Any, Any]], str]
WaitSlot = Callable[[], AbstractAsyncContextManager[bool]]
"""A held wait's slot: enters True when the call may hold its request, False when the
host has no slot left (the gateway's ``TOOLSAFE_GATEWAY_MAX_WAITS``)."""


@contextlib.asynccontextmanager
async def _any_wait() -> AsyncIterator[bool]:
    yield True


def _no_namespace(_: ServerRequestContext[Any, Any]) -> str | None:
    return None


def _mcp_actor(_: ServerRequestContext[Any, Any]) -> str:
    return "mcp"


class ToolsafeMCP:
    """The registry of ``client`` as MCP tools; ``wait`` bounds a call without a task."""

    def __init__(
        self,
        client: AsyncCalls,
        *,
        wait: float,
        namespace_of: NamespaceOf = _no_namespace,
        actor_of: ActorOf = _mcp_actor,
        wait_slot: WaitSlot | None = None,
        name: str = "toolsafe",
    ) -> None:
        self.client = client
        self.wait = wait
        self.wait_slot: WaitSlot = wait_slot if wait_slot is not None else _any_wait
        self.namespace_of = namespace_of
        self.actor_of = actor_of
        # Scope of refs derived from request ids where the transport has no session:
        # one per server process, so nothing derived this way survives a restart
        # (docs/agents.md: a host that replays sends _meta).
        self.process_scope = "p" + secrets.token_hex(8)
        self.server: Server[Any] = Server(
            name,
            version=_version(),
            instructions=(
                "Tools run through toolsafe: a write happens at most once per "
                "operation_ref. An answer with in_progress is not an error; ask again "
                "with the same operation_ref (or poll the task) instead of calling anew."
            ),
            on_list_tools=self.list_tools,
        )
        self.server.add_request_handler("tools/call", CallToolRequestParams, self.call_tool)
        self.server.add_request_handler("tasks/get", tasks.TaskParams, self.get_task)
        self.server.add_request_handler("tasks/update", tasks.TaskParams, self.update_task)
        self.server.add_request_handler("tasks/cancel", tasks.TaskParams, self.cancel_task)
        self.server.extensions[tasks.EXTENSION] = {}
        self.server.middleware.append(StoreFailures())

    # ------------------------------------------------------------------ tools

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        registry = self.client.catalogue()
        return ListToolsResult(tools=[Tool.model_validate(tool) for tool in mcp_tools(registry)])

    def _session_scope(self, ctx: ServerRequestContext[Any, Any]) -> str:
        headers = getattr(ctx.request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        return session if isinstance(session, str) and session else self.process_scope

    def operation_ref(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> str:
        """The call's operation_ref by the documented rule (``toolsafe.agents.mcp.mcp_ref``)."""
        request_id = ctx.request_id if ctx.request_id is not None else "none"
        try:
            return mcp_ref(
                params.meta, self._session_scope(ctx), request_id, self.namespace_of(ctx)
            )
        except ValueError as error:
            raise MCPError(INVALID_PARAMS, str(error)) from None

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | dict[str, Any]:
        """A ``tools/call``; with tracing on, under a ``tools/call {tool}`` server span
        whose parent is the ``traceparent`` of the request's ``_meta`` (else the current
        context: the gateway's HTTP span over streamable HTTP)."""
        if tracing.tracer() is None:
            return await self._call_tool(ctx, params)
        attributes = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tracing.tool_name(params.name),
        }
        with tracing.span(
            f"tools/call {tracing.tool_name(params.name)}",
            attributes,
            kind="server",
            parent=tracing.context_from(params.meta),
        ):
            return await self._call_tool(ctx, params)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | dict[str, Any]:
        if "arguments" in params.model_fields_set and params.arguments is None:
            # Absent arguments are no arguments; an explicit null is not an object.
            raise MCPError(
                INVALID_PARAMS,
                "tools/call arguments must be an object, not null (omit it or send {})",
            )
        ref = self.operation_ref(ctx, params)
        arguments = dict(params.arguments or {})
        try:
            view = await self._submit(ctx, params.name, arguments, ref)
        except UnknownToolError as error:
            raise MCPError(INVALID_PARAMS, str(error)) from None
        except InvalidInput as error:
            return refusal_result(error.code, str(error), error.errors)
        except (OperationRefConflict, InvalidOperationRef, TransitionRefused) as error:
            code = getattr(error, "code", type(error).__name__)
            return refusal_result(str(code), str(error))
        if tasks.wants_tasks(ctx.meta) and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # (A handshake client's _meta may name the extension; its protocol has no
            # place for a task, so it gets the bounded wait.)
            return tasks.created(view, utcnow()).wire()
        if not view.needs_agent:
            async with self.wait_slot() as held:
                # Without a slot the call answers at once: in progress, ask again.
                if held:
                    view = await self.client.settle(ref, self.wait)
        return call_tool_result(view)

    async def _submit(
        self, ctx: ServerRequestContext[Any, Any], tool: str, arguments: dict[str, Any], ref: str
    ) -> StepView:
        """Submit, or, for a step that waits for corrected input, send the correction
        under the same ref: a model re-issuing the call with fixed fields."""
        actor = self.actor_of(ctx)
        try:
            return (await self.client.submit_call(tool, arguments, ref, actor=actor)).view
        except OperationRefConflict:
            existing = await self.client.view(ref)
            if existing.tool != tool or existing.state is not StepState.NEEDS_INPUT:
                raise
            return await self.client.provide_input(ref, arguments, actor=actor)

    # ------------------------------------------------------------------ tasks

    def _task_ref(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> str:
        if not tasks.wants_tasks(ctx.meta):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Missing required client capability: declare {tasks.EXTENSION} in this "
                "request's _meta io.modelcontextprotocol/clientCapabilities.extensions",
                NEEDS_TASKS,
            )
        namespace = self.namespace_of(ctx)
        if namespace is not None and not task_id.startswith(namespace + "/"):
            task_id = f"{namespace}/{task_id}"
        if len(task_id) > MAX_OPERATION_REF or not OPERATION_REF_PATTERN.fullmatch(task_id):
            raise MCPError(TASK_NOT_FOUND, f"Failed to retrieve task: no task {task_id[:80]!r}")
        return task_id

    async def _view(self, ref: str) -> StepView:
        try:
            return await self.client.view(ref)
        except StepNotFound:
            raise MCPError(TASK_NOT_FOUND, f"Failed to retrieve task: no task {ref!r}") from None

    async def get_task(
        self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams
    ) -> dict[str, Any]:
        ref = self._task_ref(ctx, params.task_id)
        view = await self._view(ref)
        return tasks.detailed(view, utcnow(), tasks.cancel_note(view)).wire()

    async def update_task(
        self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams
    ) -> EmptyResult:
        # toolsafe issues no input requests: corrected input is a tools/call under the
        # same ref, approval is a human's. The extension asks for an ack regardless.
        await self._view(self._task_ref(ctx, params.task_id))
        return EmptyResult()

    async def cancel_task(
        self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams
    ) -> EmptyResult:
        """Acknowledged, as the extension asks: cancellation is cooperative. A waiting
        step is cancelled now; a running one, or one whose outcome is unknown, keeps
        the request (recorded in the step store) until it waits with nothing written,
        and a write verification finds stays a success; a step already over stays as
        it is. ``tasks/get`` reports what became of it."""
        ref = self._task_ref(ctx, params.task_id)
        await self._view(ref)
        await self.client.request_cancel(
            ref, "cancelled through MCP tasks/cancel", by=self.actor_of(ctx)
        )
        return EmptyResult()
