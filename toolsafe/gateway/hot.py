"""The hot request, an agent reading its step (``GET /v1/calls/{operation_ref}``), in a
lane of its own: FastAPI's routing and dependency resolution cost about as much CPU as
the rest of the gateway's work on it, so a request the lane can answer exactly as the
route would skips them. Anything else goes the full way: an unknown or absent key (the
``caller`` dependency checks, limits and refuses it), a query other than a plain
``wait``, a path another route could match, dependency overrides, FastAPI's own
telemetry, a root path.

Innermost of the gateway's middleware: requests in the lane are counted, limited and
traced like every other; its errors reach the app's own exception handlers."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, cast

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from toolsafe.gateway.auth import known_caller
from toolsafe.gateway.routes import calls
from toolsafe.gateway.state import Gateway

PREFIX: Final = "/v1/calls/"
PLAIN_WAIT: Final = re.compile(rb"wait=([0-9]{1,5}(?:\.[0-9]{1,6})?)")
"""The query of a held view as the clients send it (``wait=30.000``)."""

HttpHandler = Callable[[Request, Exception], Response | Awaitable[Response]]


def plain_wait(query: bytes) -> float | None:
    """The seconds of an empty query (0) or of a plain ``wait=<seconds>`` within the
    route's bound, else None (the route's own validation then answers)."""
    if not query:
        return 0.0
    match = PLAIN_WAIT.fullmatch(query)
    if match is None:
        return None
    seconds = float(match.group(1))
    return seconds if seconds <= calls.WAIT_BOUND else None


@dataclass(frozen=True)
class Lane:
    """What the lane needs of the app, read once its routes are all there."""

    route: Any  # the view's route object, as the router puts it in scope["route"]
    pattern: re.Pattern[str]
    others: tuple[re.Pattern[str], ...]  # any other route's that may match, any method


def _flat(routes: Iterable[Any]) -> Iterator[Any]:
    """Each route of the app with its full path, included routers' routes included."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:
            yield from contexts()
        else:
            yield route


def lane_of(api: FastAPI) -> Lane | None:
    """The lane for ``api``'s view route; None (no lane) when a route cannot be read."""
    view: Any = None
    others: list[re.Pattern[str]] = []
    for entry in _flat(api.router.routes):
        pattern = getattr(entry, "path_regex", None)
        if not isinstance(pattern, re.Pattern):
            return None  # a route the lane cannot see past: everything goes the full way
        route = getattr(entry, "original_route", None) or entry
        if getattr(route, "endpoint", None) is calls.view:
            view = (route, pattern)
            continue
        literal = str(getattr(entry, "path_format", "")).split("{", 1)[0]
        if literal.startswith(PREFIX) or PREFIX.startswith(literal):
            others.append(pattern)  # its paths may begin with the view's prefix
    if view is None:
        return None
    return Lane(view[0], view[1], tuple(others))


class HotViews:
    """ASGI middleware answering the view of a known caller without FastAPI's routing
    and dependency resolution (the module's docstring says when)."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._lane: Lane | None = None
        self._read = False

    def lane(self) -> Lane | None:
        # Read at the first request: every route is declared by then.
        if not self._read:
            self._lane = lane_of(self.api)
            self._read = True
        return self._lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "GET"
            or not scope["path"].startswith(PREFIX)
            or scope.get("root_path")
            or scope.get("fastapi.telemetry") is not None
            or self.api.dependency_overrides
        ):
            await self.app(scope, receive, send)
            return
        lane = self.lane()
        path: str = scope["path"]
        matched = None if lane is None else lane.pattern.match(path)
        wait = plain_wait(scope["query_string"])
        if (
            lane is None
            or matched is None
            or wait is None
            or any(other.match(path) for other in lane.others)
        ):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        state: Gateway = self.api.state.gateway
        principal = await known_caller(request, state.authenticator)
        if principal is None:
            await self.app(scope, receive, send)
            return
        operation_ref = matched.group("operation_ref")
        scope["route"] = lane.route
        scope["endpoint"] = calls.view
        scope["path_params"] = {"operation_ref": operation_ref}
        response: Response
        try:
            response = await calls.answer_view(state, principal, operation_ref, wait)
        except Exception as error:
            handler = self._handler(error)
            if handler is None:
                raise  # the server's last resort answers it, as for any route
            answered = handler(request, error)
            response = await answered if inspect.isawaitable(answered) else answered
        await response(scope, receive, send)

    def _handler(self, error: Exception) -> HttpHandler | None:
        """The app's handler for ``error`` as its exception middleware finds it (by the
        error's classes, most specific first); ``Exception``'s belongs to the outermost
        middleware, which a re-raised error reaches."""
        handlers = self.api.exception_handlers
        for kind in type(error).__mro__:
            if kind is Exception:
                return None
            found = handlers.get(kind)
            if found is not None:
                return cast(HttpHandler, found)
        return None
