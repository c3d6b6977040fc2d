"""How the kit injects each fault into an adapter: the faults, what the proxy does for
each, the check that the operation_ref reached the downstream where the adapter says,
and the target of an HTTP toolkit adapter (through the proxy). A ``@tool`` function's
target is in ``function_target``; the scenarios are the same for both."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.http import HttpAdapter
from toolsafe.adapters.protocol import Adapter, LookupResult
from toolsafe.adapters.sending import KeyPlace
from toolsafe.conformance import hostile
from toolsafe.conformance.proxy import PASS, Action, FaultProxy, Seen, refused_url

FaultKind = Literal[
    "not_sent", "ambiguous", "delivered", "declared_after", "retry_after", "failure_body",
    "hostile", "no_evidence",
]  # fmt: skip


@dataclass(frozen=True)
class WriteFault:
    """One way a call can go wrong, and what kind of wrong it is."""

    name: str
    kind: FaultKind
    wait: timedelta | None = None  # what a Retry-After fault asks for
    raised: type[BaseException] | None = None  # a declared type the kit raises


@dataclass(frozen=True)
class LookupFault:
    """One way a lookup can be down, or a 404 that is not the service's own."""

    name: str
    not_found_shape: bool = False


@dataclass
class Attempt:
    envelope: AnySuccess | ToolError
    started: datetime
    ended: datetime
    # Whether the call reached the service and the service acted (None: cannot tell).
    delivered: bool | None = None
    # The requests the proxy saw for this call (None: the kit cannot see them).
    seen: list[Seen] | None = None


class CannotInject(Exception):
    """The fault cannot be injected into this adapter (the row is skipped)."""


class Target:
    """An adapter under test and the faults it can be put through."""

    kind = "adapter"
    note = (
        "neither an HTTP toolkit adapter nor a @tool function: the kit cannot inject "
        "faults into its calls (wrap the SDK call in @tool, or use the pytest fixtures)"
    )

    def __init__(self, adapter: Adapter[Any]) -> None:
        self.adapter = adapter

    @property
    def max_retry_after(self) -> timedelta:
        return timedelta(minutes=5)

    @property
    def key_place(self) -> KeyPlace | None:
        """Where the operation_ref must arrive, when the kit can see the requests."""
        return None

    def write_faults(self) -> list[WriteFault]:
        return []

    def lookup_faults(self) -> list[LookupFault]:
        return []

    def write(self, data: Mapping[str, Any], ref: str, fault: WriteFault | None) -> Attempt:
        started = datetime.now(UTC)
        envelope = call_adapter(self.adapter, data, ref)
        return Attempt(envelope, started, datetime.now(UTC), None)

    def lookup(self, ref: str, fault: LookupFault | None) -> LookupResult:
        return call_lookup(self.adapter, ref)

    def count(self, ref: str) -> int | None:
        counter = getattr(self.adapter, "count_effects", None)
        if not callable(counter):
            return None
        try:
            value = counter(ref)
        except Exception:
            return None
        return value if isinstance(value, int) else None

    def close(self) -> None:
        return None


def retry_headers(seconds: int, *, http_date: bool) -> tuple[tuple[str, str], ...]:
    now = datetime.now(UTC)
    value = (
        format_datetime(now + timedelta(seconds=seconds), usegmt=True)
        if http_date
        else str(seconds)
    )
    return (("Retry-After", value), ("Date", format_datetime(now, usegmt=True)))


# --- faults on the wire ------------------------------------------------------------------
# The timeout the adapter gets in the slow-answer scenarios (at most the run's own): the
# answer is held until the adapter gives up, so any timeout shows how the adapter
# classifies one; a short one keeps those scenarios short. Every other call keeps the
# run's timeout, which a normal answer must fit in.
SLOW_ANSWER_TIMEOUT = 0.2
DROPPED_BEFORE = "connection dropped before the service saw the request"
DROPPED_AFTER = "request delivered, connection dropped before the answer"
SLOW_ANSWER = "request delivered, answer slower than the read timeout"
QUEUED = '202 Accepted {"status": "queued", "id": "job_1"} (nothing stored)'
NO_RECORD = '200 whose body names no record ({"status": "ok"})'
_IN_PLACE: dict[str, bytes] = {
    QUEUED: b'{"status": "queued", "id": "job_1"}',
    NO_RECORD: b'{"status": "ok"}',
}


def wire_faults() -> list[WriteFault]:
    """The faults the proxy injects into any adapter that talks HTTP through it."""
    return [
        WriteFault("connection refused (nothing sent)", "not_sent"),
        WriteFault(DROPPED_BEFORE, "ambiguous"),
        WriteFault(DROPPED_AFTER, "delivered"),
        WriteFault("request delivered, then 502 Bad Gateway", "delivered"),
        WriteFault("request delivered, then 504 Gateway Timeout", "delivered"),
        WriteFault(SLOW_ANSWER, "delivered"),
        WriteFault(QUEUED, "no_evidence"),
        WriteFault(NO_RECORD, "no_evidence"),
    ]


def wire_action(fault: WriteFault, stall: float) -> Action:
    """What the proxy does for one of :func:`wire_faults` (and the HTTP-only ones)."""
    name = fault.name
    if name == DROPPED_BEFORE:
        return Action("drop_before")
    if name == DROPPED_AFTER:
        return Action("drop_after")
    if name.startswith("request delivered, then 50"):
        return Action("status_after", status=int(name.split("then ")[1][:3]))
    if name == SLOW_ANSWER:
        return Action("stall_after", seconds=stall)
    if name in _IN_PLACE:
        return Action("answer", status=int(name[:3]), body=_IN_PLACE[name])
    if fault.kind == "retry_after" and fault.wait is not None:
        status = int(name[:3])
        seconds = int(fault.wait.total_seconds())
        headers = retry_headers(seconds, http_date="HTTP-date" in name)
        body = b'{"error": {"code": "RATE_LIMITED"}}' if status == 429 else b"<html>busy</html>"
        content_type = "application/json" if status == 429 else "text/html"
        return Action("answer", status=status, body=body, content_type=content_type,
                      headers=headers)  # fmt: skip
    if fault.kind == "failure_body":
        payload: dict[str, object] = {
            "error": {"code": "CONFORMANCE_DECLINED", "message": hostile.TEXT}
        }
        payload["ok" if "ok" in name else "status"] = False if "ok" in name else "failed"
        return Action("answer", body=json.dumps(payload, ensure_ascii=False).encode())
    if fault.kind == "hostile":
        for status, content_type, body in hostile.error_bodies():
            if name.startswith(f"{status} {content_type}"):
                return Action("answer", status=status, body=body, content_type=content_type)
    return PASS


def acted(seen: list[Seen]) -> bool:
    return any(
        s.forwarded and s.upstream_status is not None and s.upstream_status < 300 for s in seen
    )


# --- where the operation_ref went ----------------------------------------------------
def _in_body(body: bytes, dotted: str) -> tuple[object, list[str]]:
    try:
        value: object = json.loads(body or b"null")
    except ValueError:
        return None, []
    top = sorted(str(key) for key in value) if isinstance(value, dict) else []
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value, top


def key_missing(seen: list[Seen], place: KeyPlace, ref: str) -> str | None:
    """None when a request of the call carried ``ref`` in ``place``; else what the
    requests carried there instead, for the message."""
    writes = [s for s in seen if s.method != "GET"] or seen
    if not writes:
        return "no request reached the proxy"
    found: list[str] = []
    for request in writes:
        if place.where == "header":
            values = [v for n, v in request.headers if n.lower() == place.name.lower()]
            if ref in values:
                return None
            names = sorted({n for n, _ in request.headers})
            found.append(
                f"{place} carries {values[0]!r}, not the operation_ref"
                if values
                else f"no {place.name} header in the request (headers sent: {', '.join(names)})"
            )
        elif place.where == "body":
            value, top = _in_body(request.body, place.name)
            if value == ref:
                return None
            found.append(
                f"{place} holds {value!r}, not the operation_ref"
                if value is not None
                else f"no field {place.name!r} in the request body "
                f"(fields sent: {', '.join(top) or 'none'})"
            )
        else:
            query = parse_qs(urlsplit(request.path).query)
            values = query.get(place.name, [])
            if ref in values:
                return None
            sent = ", ".join(sorted(query)) or "none"
            found.append(
                f"{place} is {values[0]!r}, not the operation_ref"
                if values
                else f"no query parameter {place.name!r} (sent: {sent})"
            )
    return found[0]


# --- an HTTP toolkit adapter -------------------------------------------------------------
_NOT_FOUND_SHAPES: tuple[tuple[str, bytes, str], ...] = (
    ("lookup: 404 from a proxy (no body)", b"", "text/plain"),
    (
        "lookup: 404 from a missing route (an HTML page)",
        b"<html><body><h1>404 Not Found</h1></body></html>",
        "text/html",
    ),
    (
        'lookup: 404 from a missing route ({"error": "not_found"})',
        b'{"error": "not_found"}',
        "application/json",
    ),
    (
        'lookup: 404 from a missing route ({"detail": "Not Found"})',
        b'{"detail": "Not Found"}',
        "application/json",
    ),
)
SLOW_LOOKUP = "lookup: answer slower than the read timeout"
_LOOKUP_DOWN: tuple[tuple[str, Action], ...] = (
    ("lookup: 503 with an HTML page",
     Action("answer", status=503, body=b"<html>down</html>", content_type="text/html")),
    ("lookup: 500 with a JSON error", Action("answer", status=500, body=b'{"error": "internal"}')),
    ("lookup: 502 Bad Gateway",
     Action("answer", status=502, body=b"<html>bad gateway</html>", content_type="text/html")),
    ("lookup: connection dropped", Action("drop_before")),
    ("lookup: 200 with an HTML page",
     Action("answer", body=b"<html>maintenance</html>", content_type="text/html")),
    ("lookup: 200 with an empty object", Action("answer", body=b"{}")),
)  # fmt: skip


class HttpTarget(Target):
    """An :class:`HttpAdapter` talking to ``upstream`` through the fault proxy."""

    kind = "http"
    note = ""

    def __init__(self, original: HttpAdapter[Any], upstream: str, timeout: float) -> None:
        super().__init__(original)
        self.original = original
        self.upstream = upstream
        self.timeout = timeout
        self.proxy = FaultProxy(self.upstream).__enter__()
        limits = {
            "read_timeout": self.timeout,
            "write_timeout": self.timeout,
            "connect_timeout": self.timeout,
        }
        self.proxied = self.original.rebased(self.proxy.url, **limits)
        self.adapter = self.proxied
        # For the slow answers: the proxy holds the answer until this one gives up.
        self.impatient = self.original.rebased(
            self.proxy.url, **{**limits, "read_timeout": min(timeout, SLOW_ANSWER_TIMEOUT)}
        )
        dead, self._holder = refused_url()
        self.refused = self.original.rebased(dead, **limits)
        # The longest the proxy holds an answer, for an adapter that never gives up.
        self.stall = self.timeout + 1.5

    @property
    def max_retry_after(self) -> timedelta:
        return self.original.settings.max_retry_after

    @property
    def key_place(self) -> KeyPlace | None:
        return self.original.key_place()

    def write_faults(self) -> list[WriteFault]:
        faults = wire_faults()
        faults += [
            WriteFault("429 with Retry-After: 30", "retry_after", timedelta(seconds=30)),
            WriteFault(
                "429 with Retry-After as HTTP-date (+45 s)", "retry_after", timedelta(seconds=45)
            ),
            WriteFault("503 with Retry-After: 20", "retry_after", timedelta(seconds=20)),
            WriteFault(
                "503 with Retry-After as HTTP-date (+2 days)", "retry_after", timedelta(days=2)
            ),
            WriteFault('200 whose body reports failure ({"ok": false})', "failure_body"),
            WriteFault('200 whose body reports failure ({"status": "failed"})', "failure_body"),
        ]
        for status, content_type, _ in hostile.error_bodies():
            faults.append(
                WriteFault(f"{status} {content_type} full of secrets and instructions", "hostile")
            )
        return faults

    def write(self, data: Mapping[str, Any], ref: str, fault: WriteFault | None) -> Attempt:
        started = datetime.now(UTC)
        if fault is not None and fault.kind == "not_sent":
            envelope = call_adapter(self.refused, data, ref)
            return Attempt(envelope, started, datetime.now(UTC), False)
        adapter = (
            self.impatient if fault is not None and fault.name == SLOW_ANSWER else self.adapter
        )
        with self.proxy.acting(wire_action(fault, self.stall) if fault else PASS) as seen:
            envelope = call_adapter(adapter, data, ref)
        return Attempt(envelope, started, datetime.now(UTC), acted(seen), list(seen))

    def lookup_faults(self) -> list[LookupFault]:
        faults = [LookupFault("lookup: connection refused")]
        faults += [LookupFault(name) for name, _ in _LOOKUP_DOWN]
        faults.append(LookupFault(SLOW_LOOKUP))
        for name, body, _ in _NOT_FOUND_SHAPES:
            if not self._declared_shape(body):
                faults.append(LookupFault(name, not_found_shape=True))
        return faults

    def _declared_shape(self, body: bytes) -> bool:
        """Whether a 404 with ``body`` is the service's own declared not-found shape."""
        declared = self.original.lookup_not_found_codes
        if declared is None:
            return False
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        upstream, _ = self.original.upstream_error(parsed if isinstance(parsed, dict) else {})
        return upstream in declared

    def _lookup_action(self, fault: LookupFault) -> Action:
        for name, action in _LOOKUP_DOWN:
            if fault.name == name:
                return action
        for name, body, content_type in _NOT_FOUND_SHAPES:
            if fault.name == name:
                return Action("answer", status=404, body=body, content_type=content_type)
        if fault.name == SLOW_LOOKUP:
            return Action("stall_after", seconds=self.stall)
        return PASS

    def lookup(self, ref: str, fault: LookupFault | None) -> LookupResult:
        if fault is not None and "refused" in fault.name:
            return call_lookup(self.refused, ref)
        adapter = (
            self.impatient if fault is not None and fault.name == SLOW_LOOKUP else self.adapter
        )
        with self.proxy.acting(self._lookup_action(fault) if fault else PASS):
            return call_lookup(adapter, ref)

    def close(self) -> None:
        for adapter in (self.proxied, self.impatient, self.refused):
            adapter.close()
        self._holder.close()
        self.proxy.__exit__(None, None, None)


__all__ = [
    "SLOW_ANSWER_TIMEOUT",
    "Attempt",
    "CannotInject",
    "HttpTarget",
    "LookupFault",
    "Target",
    "WriteFault",
    "acted",
    "key_missing",
    "retry_headers",
    "wire_action",
    "wire_faults",
]
