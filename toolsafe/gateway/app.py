"""The FastAPI application of ``toolsafe serve``: routers under ``/v1``, one problem
handler, and the limits on headers and bodies applied before any route runs."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolsafe import tracing
from toolsafe.gateway import metrics as gateway_metrics
from toolsafe.gateway import problems, ui
from toolsafe.gateway.auth import Authenticator
from toolsafe.gateway.hot import HotViews
from toolsafe.gateway.json_bodies import JsonBodies
from toolsafe.gateway.problems import ApiProblem, problem_response
from toolsafe.gateway.routes import actions, calls, events, tools
from toolsafe.gateway.state import Gateway
from toolsafe.settings import Settings
from toolsafe.tasks.client import Client

if TYPE_CHECKING:
    from toolsafe.mcp.http import StreamableMCP

DESCRIPTION = """\
toolsafe's front door for agent services in any language: submit tool calls (the
`Idempotency-Key` header is the operation_ref), wait for their envelope, correct input,
cancel; operators approve, reject, resolve and re-drive. Every error is RFC 9457
`application/problem+json` with a stable `code`. See docs/gateway.md.
"""


class Limits:
    """431 for headers over ``TOOLSAFE_GATEWAY_MAX_HEADER_BYTES``, 413 for a body over
    ``TOOLSAFE_GATEWAY_MAX_BODY_BYTES`` (read up to the limit, never further)."""

    def __init__(self, app: ASGIApp, max_header: int, max_body: int) -> None:
        self.app = app
        self.max_header = max_header
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = sum(len(name) + len(value) for name, value in scope["headers"])
        if size > self.max_header:
            await self._refuse(
                scope,
                send,
                "HEADERS_TOO_LARGE",
                f"headers of {size} bytes are over the limit "
                f"of {self.max_header} (TOOLSAFE_GATEWAY_MAX_HEADER_BYTES)",
            )
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await self._refuse_body(scope, send)
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_body:
                await self._refuse_body(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse_body(self, scope: Scope, send: Send) -> None:
        await self._refuse(
            scope, send, "BODY_TOO_LARGE",
            f"the body is over the limit of {self.max_body} bytes "
            "(TOOLSAFE_GATEWAY_MAX_BODY_BYTES)",
        )  # fmt: skip

    async def _refuse(self, scope: Scope, send: Send, code: str, detail: str) -> None:
        response = problem_response(ApiProblem(code, detail), scope.get("path"))
        response.headers["Connection"] = "close"
        await response(scope, _drain, send)


async def _drain() -> Message:
    return {"type": "http.disconnect"}


def _streamable_mcp(state: Gateway) -> StreamableMCP | None:
    """The MCP app for ``/mcp`` when the ``mcp`` extra is installed, else ``None``."""
    try:
        from toolsafe.mcp.http import StreamableMCP
    except ImportError:
        return None
    settings = state.settings
    # A tools/call holds its request like ?wait= does: never beyond the gateway's bound.
    wait = min(settings.gateway.mcp_wait, settings.gateway.max_wait)
    return StreamableMCP(
        state.aclient,
        wait=wait,
        max_body=settings.gateway.max_body,
        loopback_only=state.authenticator.keys is None,
        wait_slot=state.wait_slot,  # counted in TOOLSAFE_GATEWAY_MAX_WAITS
    )


def _own_tracing() -> dict[str, Any]:
    """FastAPI's native OpenTelemetry (0.13x+: server and endpoint spans, the URL's path
    and query among their attributes) turned off while toolsafe traces: the gateway's
    one server span is ``TracedRequests``, which records only redacted values."""
    if tracing.tracer() is None or "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"tracing": False}}


def create_gateway(
    settings: Settings, *, client: Client | None = None, auth: bool = True
) -> FastAPI:
    """The app; ``auth=False`` is the development mode (the caller checks loopback)."""
    client = client if client is not None else Client.from_settings(settings)
    # The keys live in the step store's backend; one without them refuses here, at start.
    keys = client.runtime.backend.keys if auth else None
    authenticator = Authenticator(
        keys,
        failures=settings.gateway.auth_failures,
        window=settings.gateway.auth_window,
        verifiers=settings.gateway.auth_verifiers,
    )
    state = Gateway(settings, client, authenticator)
    mcp = _streamable_mcp(state)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with (
            mcp.running() if mcp is not None else contextlib.nullcontext(),
            state.reading_on_the_loop(),
        ):
            yield

    app = FastAPI(
        title="toolsafe gateway",
        version="1",
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        lifespan=lifespan,
        **_own_tracing(),
    )
    app.state.gateway = state
    app.state.authenticator = app.state.gateway.authenticator
    # Every /v1 route checks a key, so any may answer 429 when bad keys are limited.
    limited: dict[int | str, dict[str, Any]] = {429: problems.documented(problems.KEY_LIMIT)}
    for module in (tools, actions, events, calls):  # the more specific paths first
        app.include_router(module.router, prefix="/v1", responses=limited)
    problems.install(app)
    if mcp is not None:
        from toolsafe.gateway.mcp import McpEndpoint

        endpoint = McpEndpoint(mcp, state.authenticator)
        app.router.routes.append(
            Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"])
        )
    ui.install(app, app.state.gateway)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        # No store access: a liveness probe that answers while the database is down.
        return {"ok": True, "waits": app.state.gateway.waits}

    app.add_middleware(HotViews, api=app)  # innermost: its requests are counted and limited
    app.add_middleware(JsonBodies)  # inside Limits: the body is read whole by then
    app.add_middleware(
        Limits, max_header=settings.gateway.max_header, max_body=settings.gateway.max_body
    )
    gateway_metrics.install(app)  # outside Limits: refusals by Limits are counted too
    if tracing.tracer() is not None:
        # Outermost: one server span per request, child of its ``traceparent``.
        from toolsafe.gateway.tracing import TracedRequests

        app.add_middleware(TracedRequests)
    return app
