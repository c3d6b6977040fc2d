"""The gateway's own figures: requests by route template, method and status, and their
latency, counted by this process and served at ``/metrics``. Each gateway process counts
only what it answered, so summing over instances is right; the store-wide figures come
from ``toolsafe metrics`` (docs/operations.md)."""

from __future__ import annotations

import time
from typing import Final

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client import Histogram as PromHistogram
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Seconds; waits (``?wait=``) last up to TOOLSAFE_GATEWAY_MAX_WAIT, 60 s by default."""

UNMATCHED: Final = "unmatched"
"""The route label of a request no route matched (its path is not a label: unbounded)."""


def template(scope: Scope) -> str:
    """The route template that answered, prefix included (``/v1/calls/{operation_ref:path}``).

    FastAPI reports the matched route; depending on its version an included router's
    routes carry their prefix or not, so the prefix is what precedes the part of the
    path the route's own pattern matches."""
    route = scope.get("route")
    path_format = getattr(route, "path_format", None) or getattr(route, "path", None)
    if not isinstance(path_format, str):
        return UNMATCHED
    pattern = getattr(route, "path_regex", None)
    path = str(scope.get("path", ""))
    if pattern is not None:
        for cut, char in enumerate(path):
            if char == "/" and pattern.match(path[cut:]):
                return path[:cut] + path_format
    return path_format


class RequestMetrics:
    """ASGI middleware counting every HTTP request it passes on, refusals included."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "toolsafe_gateway_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = PromHistogram(
            "toolsafe_gateway_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response, by route template.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # a route that raised past every handler

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = template(scope)
            method = str(scope["method"])
            self.requests.labels(route, method, str(status)).inc()
            self.latency.labels(route, method).observe(time.perf_counter() - started)


def install(app: FastAPI) -> None:
    """Count the app's requests (outermost, so refusals count) and serve ``/metrics``."""
    registry = CollectorRegistry(auto_describe=False)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestMetrics, registry=registry)
