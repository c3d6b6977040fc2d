"""A server span per gateway request, child of the caller's W3C ``traceparent``
(installed only while tracing is on: docs/tracing.md)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolsafe import tracing
from toolsafe.gateway.metrics import UNMATCHED, template

_WANTED = tuple(name.encode("latin-1") for name in tracing.TRACE_HEADERS)


class TracedRequests:
    """Pure ASGI: the request's context is the one the route (and the client's submit,
    in its thread) runs in. Recorded: the method, the route's template, the status;
    never the path (it holds refs and namespaces), the query or a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _WANTED
        }
        method = str(scope.get("method", "GET"))
        with tracing.span(
            method,
            {"http.request.method": method, "url.scheme": str(scope.get("scheme", "http"))},
            kind="server",
            parent=tracing.context_from(carrier),
        ) as traced:

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    traced.set("http.response.status_code", status)
                    if status >= 500:
                        traced.failed(str(status))
                await send(message)

            try:
                await self.app(scope, receive, sending)
            finally:
                route = template(scope)
                if route != UNMATCHED:
                    traced.set("http.route", route)
                    traced.rename(f"{method} {route}")
