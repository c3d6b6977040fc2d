"""Reading what an HTTP downstream did: transport-error groups, Retry-After, error
bodies; and keeping the transport's own logs free of upstream text."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal

import httpx

from toolsafe.adapters.redaction import RedactingFilter

# httpcore's DEBUG trace carries raw response headers and httpx's INFO request line the
# upstream reason phrase: both are upstream text. Filters on a logger do not reach its children,
# hence every logger by name.
TRANSPORT_LOGGERS: Final = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)


class _TransportLogFilter(RedactingFilter):
    """Drops the transport's trace and request lines (toolsafe logs the status and code
    itself) and redacts whatever it logs at WARNING or above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and super().filter(record)


_TRANSPORT_FILTER: Final = _TransportLogFilter()


def guard_transport_logs() -> None:
    """Attach the transport log filter once (idempotent; called by every adapter)."""
    for name in TRANSPORT_LOGGERS:
        logger = logging.getLogger(name)
        if _TRANSPORT_FILTER not in logger.filters:
            logger.addFilter(_TRANSPORT_FILTER)


Sent = Literal["not_sent", "client_bug", "maybe_sent"]


@dataclass(frozen=True)
class Observed:
    """What came back: status, headers and at most ``max_body_bytes`` of the body."""

    status: int
    headers: httpx.Headers
    body: bytes
    received_at: datetime

    def json_value(self) -> Any:
        """The body as JSON (object, list or scalar); ``None`` when it is not JSON."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            # RecursionError: "[[[[…" nested deeper than the parser's stack.
            return None

    def json_object(self) -> dict[str, Any] | None:
        value = self.json_value()
        return value if isinstance(value, dict) else None

    def json_list(self) -> list[Any] | None:
        value = self.json_value()
        return value if isinstance(value, list) else None

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of a streamed response's body; the rest is never read (an
    oversized body is not worth the memory). Closes the response."""
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= max_bytes:
                break
    finally:
        response.close()
    return b"".join(chunks)[:max_bytes]


def observe(response: httpx.Response, max_bytes: int) -> Observed:
    """What a streamed response says, its body read by :func:`read_bounded`."""
    body = read_bounded(response, max_bytes)
    return Observed(response.status_code, response.headers, body, datetime.now(UTC))


def transport_failure(error: BaseException) -> Sent:
    """How far a request that raised got: DESIGN §7's three groups of httpx errors."""
    if isinstance(
        error, httpx.ConnectTimeout | httpx.PoolTimeout | httpx.ConnectError | httpx.ProxyError
    ):
        return "not_sent"
    if isinstance(error, httpx.InvalidURL | httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return "client_bug"
    # WriteTimeout, WriteError, ReadTimeout, ReadError, RemoteProtocolError and anything
    # unforeseen: bytes may have reached the downstream.
    return "maybe_sent"


def snake_case(name: str) -> str:
    """``ReadTimeout`` → ``read_timeout``, ``InvalidURL`` → ``invalid_url``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def parse_retry_after(value: str, reference: datetime) -> timedelta | None:
    """A ``Retry-After`` value as a wait: delta-seconds, or an HTTP-date less
    ``reference`` (the time the answer was given); ``None`` when it is neither."""
    value = value.strip()
    if value.isdigit():
        return timedelta(seconds=int(value[:9]))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when - reference


def retry_after_delay(headers: httpx.Headers, received_at: datetime) -> timedelta | None:
    """The wait a ``Retry-After`` asks for: delta-seconds, or an HTTP-date read against
    the response's own ``Date`` (so that clock skew between the hosts does not count)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    reference = received_at
    date = headers.get("date")
    if date:
        try:
            reference = parsedate_to_datetime(date)
        except (TypeError, ValueError, IndexError, OverflowError):
            reference = received_at
        if reference.tzinfo is None:
            reference = reference.replace(tzinfo=UTC)
    return parse_retry_after(value, reference)


def error_parts(body: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The upstream code and field names of an error body: ``{"error": {"code", "field" |
    "fields"}}`` or the same keys at the top level. Nothing else of the body is read."""
    inner = body.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
    code = source.get("code")
    if not isinstance(code, str) and isinstance(inner, str):
        code = inner
    names: list[str] = []
    for key in ("field", "fields"):
        value = source.get(key)
        if isinstance(value, str):
            names.extend(part.strip() for part in value.split(","))
        elif isinstance(value, list):
            names.extend(item for item in value if isinstance(item, str))
    return (code if isinstance(code, str) else None), names


def body_texts(value: Any, limit: int = 256) -> list[str]:
    """The strings inside a decoded JSON body, keys included (at most ``limit``): JSON
    escapes (``\\n``, ``\\u5ffd``) would hide instructions from a scan of the raw text."""
    found: list[str] = []
    pending = [value]
    while pending and len(found) < limit:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


PENDING_STATES: Final = frozenset({"queued", "pending", "accepted", "processing", "scheduled"})


def reports_pending(body: Mapping[str, Any]) -> bool:
    """Whether a body says the work was only accepted, not done (``status: "queued"``):
    an answer that names no stored record."""
    state = body.get("status")
    return isinstance(state, str) and state.lower() in PENDING_STATES


def reports_failure(body: Mapping[str, Any]) -> bool:
    """Whether a 2xx body says the operation failed (the legacy "200 with an error")."""
    status = body.get("status")
    return (
        body.get("ok") is False
        or body.get("success") is False
        or body.get("error") not in (None, "", {}, [])
        or (isinstance(status, str) and status.lower() in {"error", "failed", "failure"})
    )
