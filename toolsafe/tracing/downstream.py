"""The HTTP toolkit's requests under a client span, carrying ``traceparent`` downstream
(installed into ``toolsafe.adapters.outgoing`` while tracing is on)."""

from __future__ import annotations

import httpx

from toolsafe.adapters.outgoing import Send
from toolsafe.tracing.spans import Scalar, span


def traced_send(request: httpx.Request, transport: Send) -> httpx.Response:
    """Send ``request`` under a ``{method}`` client span whose context rides in the
    request's W3C headers. Only the method, host, port and status are recorded: never the
    URL's path or query (they may hold the tool's input), never a body."""
    from opentelemetry.propagate import inject

    url = request.url
    attributes: dict[str, Scalar | None] = {
        "http.request.method": request.method,
        "server.address": url.host,
        "server.port": url.port or (443 if url.scheme == "https" else 80),
    }
    with span(request.method, attributes, kind="client") as sent:
        inject(request.headers)
        response = transport(request)
        sent.set("http.response.status_code", response.status_code)
        if response.status_code >= 500:
            sent.failed(str(response.status_code))
        return response
