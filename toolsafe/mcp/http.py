"""``toolsafe mcp`` over streamable HTTP, as an ASGI app the gateway mounts at ``/mcp``.

Stateless: every request stands alone (no MCP session to lose when the process
restarts); refs come from ``_meta`` (``toolsafe.agents.mcp.mcp_ref``) and tasks from the step
store. Who calls is the gateway's business: it authenticates the request and leaves the
caller's namespace and actor in the ASGI scope (:data:`SCOPE_KEY`), where the handlers
read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from toolsafe.mcp.server import ToolsafeMCP, WaitSlot
from toolsafe.tasks.calls import AsyncCalls

SCOPE_KEY: Final = "toolsafe.mcp.caller"


@dataclass(frozen=True)
class Caller:
    """What the gateway tells the MCP handlers about an authenticated request."""

    namespace: str | None
    actor: str


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller | None:
    scope = getattr(ctx.request, "scope", None)
    found = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Caller) else None


def _namespace(ctx: ServerRequestContext[Any, Any]) -> str | None:
    caller = _caller(ctx)
    if caller is None:  # the gateway sets it on every request it lets through
        raise PermissionError("an MCP request reached toolsafe without a caller")
    return caller.namespace


def _actor(ctx: ServerRequestContext[Any, Any]) -> str:
    caller = _caller(ctx)
    return "mcp" if caller is None else caller.actor


class StreamableMCP:
    """The ASGI app for ``/mcp``; :meth:`running` must wrap the hosting app's life."""

    def __init__(
        self,
        client: AsyncCalls,
        *,
        wait: float,
        max_body: int,
        loopback_only: bool = False,
        wait_slot: WaitSlot | None = None,
    ) -> None:
        self.mcp = ToolsafeMCP(
            client,
            wait=wait,
            namespace_of=_namespace,
            actor_of=_actor,
            wait_slot=wait_slot,
        )
        # Without keys (the gateway's development mode, loopback only) a web page could
        # reach the server through DNS rebinding: only loopback hosts and origins then.
        security = (
            TransportSecuritySettings(
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
            if loopback_only
            else None
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.mcp.server,
            json_response=True,
            stateless=True,
            security_settings=security,
            max_request_body_size=max_body,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)
