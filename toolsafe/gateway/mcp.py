"""``/mcp``: the MCP server (``toolsafe.mcp``) over streamable HTTP, under the
gateway's keys: a request without a valid Bearer key is answered 401 before MCP sees
it, and the key's namespace scopes every ref and task id, as on ``/v1``."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from toolsafe.gateway.auth import Authenticator, source_of
from toolsafe.gateway.problems import ApiProblem, problem_response
from toolsafe.mcp.http import SCOPE_KEY, Caller


class McpEndpoint:
    """Authenticates, then hands the request to the MCP app."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = dict(scope.get("headers") or []).get(b"authorization")
        scheme, _, token = header.decode("latin-1").partition(" ") if header else ("", "", "")
        try:
            # As on /v1: a cached key on the event loop, scrypt in a thread, under limits.
            principal = await self.authenticator.authenticate(
                scheme or None, token.strip() or None, source_of(scope.get("client"))
            )
        except ApiProblem as problem:
            await problem_response(problem, scope.get("path"))(scope, receive, send)
            return
        scope[SCOPE_KEY] = Caller(namespace=principal.namespace, actor=principal.actor)
        await self.app(scope, receive, send)
