"""The seam every HTTP request of the toolkit goes out through.

Without anything installed a request is sent as it is. The tracing room
(``toolsafe.tracing``, docs/tracing.md) installs a sender that opens a client span and
adds the W3C ``traceparent`` header, so the downstream sees the call's trace. Adapters
know nothing of OpenTelemetry: they only send through :func:`send`.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

Send = Callable[[httpx.Request], httpx.Response]
Sender = Callable[[httpx.Request, Send], httpx.Response]

_sender: Sender | None = None


def install(sender: Sender | None) -> None:
    """Send every later request through ``sender`` (None: straight out again)."""
    global _sender
    _sender = sender


def installed() -> Sender | None:
    return _sender


def send(request: httpx.Request, transport: Send) -> httpx.Response:
    """``transport(request)``, through the installed sender if there is one."""
    sender = _sender
    if sender is None:
        return transport(request)
    return sender(request, transport)
