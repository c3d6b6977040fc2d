"""How the kit injects each fault into an adapter: through the proxy for an HTTP adapter,
by wrapping the call for a function adapter; the scenarios are the same for both."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Literal

from toolsafe.adapters import codes
from toolsafe.adapters.calls import Run
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.function import FunctionAdapter, Raised
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.http import HttpAdapter
from toolsafe.adapters.protocol import Adapter, LookupResult
from toolsafe.conformance import hostile
from toolsafe.conformance.proxy import PASS, Action, FaultProxy, Seen, refused_url

FaultKind = Literal["not_sent", "ambiguous", "delivered", "retry_after", "failure_body", "hostile"]


@dataclass(frozen=True)
class WriteFault:
    """One way a call can go wrong, and what kind of wrong it is."""

    name: str
    kind: FaultKind
    wait: timedelta | None = None  # what a Retry-After fault asks for


@dataclass(frozen=True)
class LookupFault:
    """One way a lookup can be down; ``advisory`` ones warn instead of failing."""

    name: str
    advisory: bool = False
    note: str = ""


@dataclass
class Attempt:
    envelope: AnySuccess | ToolError
    started: datetime
    ended: datetime
    # Whether the call reached the service and the service acted (None: cannot tell).
    delivered: bool | None = None


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


def _retry_headers(seconds: int, *, http_date: bool) -> tuple[tuple[str, str], ...]:
    now = datetime.now(UTC)
    value = (
        format_datetime(now + timedelta(seconds=seconds), usegmt=True)
        if http_date
        else str(seconds)
    )
    return (("Retry-After", value), ("Date", format_datetime(now, usegmt=True)))


class HttpTarget(Target):
    """An :class:`HttpAdapter` talking to its service through the fault proxy."""

    kind = "http"
    note = ""

    def __init__(self, adapter: HttpAdapter[Any], base_url: str | None, timeout: float) -> None:
        super().__init__(adapter)
        self.original = adapter
        self.timeout = timeout
        self.proxy = FaultProxy(base_url or adapter.settings.base_url).__enter__()
        limits = {"read_timeout": timeout, "write_timeout": timeout, "connect_timeout": timeout}
        self.proxied = adapter.rebased(self.proxy.url, **limits)
        self.adapter = self.proxied
        dead, self._holder = refused_url()
        self.refused = adapter.rebased(dead, **limits)
        self.stall = timeout + 1.5

    @property
    def max_retry_after(self) -> timedelta:
        return self.original.settings.max_retry_after

    def write_faults(self) -> list[WriteFault]:
        faults = [
            WriteFault("connection refused (nothing sent)", "not_sent"),
            WriteFault("connection dropped before the service saw the request", "ambiguous"),
            WriteFault("request delivered, connection dropped before the answer", "delivered"),
            WriteFault("request delivered, then 502 Bad Gateway", "delivered"),
            WriteFault("request delivered, then 504 Gateway Timeout", "delivered"),
            WriteFault("request delivered, answer slower than the read timeout", "delivered"),
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

    def _action(self, fault: WriteFault) -> Action:
        name = fault.name
        if name.startswith("connection dropped before"):
            return Action("drop_before")
        if name.startswith("request delivered, connection dropped"):
            return Action("drop_after")
        if name.startswith("request delivered, then 50"):
            return Action("status_after", status=int(name.split("then ")[1][:3]))
        if name.startswith("request delivered, answer slower"):
            return Action("stall_after", seconds=self.stall)
        if fault.kind == "retry_after" and fault.wait is not None:
            status = int(name[:3])
            seconds = int(fault.wait.total_seconds())
            headers = _retry_headers(seconds, http_date="HTTP-date" in name)
            body = b'{"error": {"code": "RATE_LIMITED"}}' if status == 429 else b"<html>busy</html>"
            content_type = "application/json" if status == 429 else "text/html"
            return Action(
                "answer", status=status, body=body, content_type=content_type, headers=headers
            )
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

    def write(self, data: Mapping[str, Any], ref: str, fault: WriteFault | None) -> Attempt:
        started = datetime.now(UTC)
        if fault is not None and fault.kind == "not_sent":
            envelope = call_adapter(self.refused, data, ref)
            return Attempt(envelope, started, datetime.now(UTC), False)
        with self.proxy.acting(self._action(fault) if fault else PASS) as seen:
            envelope = call_adapter(self.adapter, data, ref)
        return Attempt(envelope, started, datetime.now(UTC), _acted(seen))

    def lookup_faults(self) -> list[LookupFault]:
        return [
            LookupFault("lookup: connection refused"),
            LookupFault("lookup: 503 with an HTML page"),
            LookupFault("lookup: 500 with a JSON error"),
            LookupFault("lookup: 502 Bad Gateway"),
            LookupFault("lookup: connection dropped"),
            LookupFault("lookup: answer slower than the read timeout"),
            LookupFault("lookup: 200 with an HTML page"),
            LookupFault("lookup: 200 with an empty object"),
            LookupFault(
                "lookup: bare 404 from a proxy (no body)",
                advisory=True,
                note="set lookup_not_found_codes so that only the service's own 404 means absent",
            ),
        ]

    def _lookup_action(self, fault: LookupFault) -> Action:
        name = fault.name
        if "503" in name:
            return Action("answer", status=503, body=b"<html>down</html>", content_type="text/html")
        if "500" in name:
            return Action("answer", status=500, body=b'{"error": "internal"}')
        if "502" in name:
            return Action(
                "answer", status=502, body=b"<html>bad gateway</html>", content_type="text/html"
            )
        if "dropped" in name:
            return Action("drop_before")
        if "slower" in name:
            return Action("stall_after", seconds=self.stall)
        if "HTML page" in name:
            return Action("answer", body=b"<html>maintenance</html>", content_type="text/html")
        if "empty object" in name:
            return Action("answer", body=b"{}")
        if "404" in name:
            return Action("answer", status=404, body=b"", content_type="text/plain")
        return PASS

    def lookup(self, ref: str, fault: LookupFault | None) -> LookupResult:
        if fault is not None and "refused" in fault.name:
            return call_lookup(self.refused, ref)
        with self.proxy.acting(self._lookup_action(fault) if fault else PASS):
            return call_lookup(self.adapter, ref)

    def close(self) -> None:
        for adapter in (self.proxied, self.refused):
            adapter.close()
        self._holder.close()
        self.proxy.__exit__(None, None, None)


def _acted(seen: list[Seen]) -> bool:
    return any(
        s.forwarded and s.upstream_status is not None and s.upstream_status < 300 for s in seen
    )


class UnforeseenError(Exception):
    """An exception type no adapter can have declared."""


@dataclass
class _Probe:
    """Records whether the real call ran to its end inside a wrapper."""

    completed: bool = False
    value: object = None
    calls: list[str] = field(default_factory=list)


class CallTarget(Target):
    """A :class:`FunctionAdapter`, its calls wrapped to raise before or after the real
    call, to return a failure, or to run past its timeout."""

    kind = "function"
    note = ""

    def __init__(self, adapter: FunctionAdapter, timeout: float) -> None:
        super().__init__(adapter)
        self.function_adapter = adapter
        self.timeout = None if adapter.timeout is None else min(adapter.timeout, timeout)

    @property
    def max_retry_after(self) -> timedelta:
        return self.function_adapter.max_retry_after

    def _declared_waits(self) -> list[type[BaseException]]:
        found = []
        for klass, entry in self.function_adapter.errors.items():
            code = entry.code if isinstance(entry, Raised) else entry
            if codes.spec_for(code).directive == "after_delay":
                found.append(klass)
        return found

    def write_faults(self) -> list[WriteFault]:
        faults = [
            WriteFault("ConnectionRefusedError raised before the call (nothing sent)", "not_sent"),
            WriteFault("ConnectionResetError raised after the call", "delivered"),
            WriteFault("TimeoutError raised after the call", "delivered"),
            WriteFault("an unforeseen exception raised after the call", "delivered"),
            WriteFault("an exception full of secrets and instructions, before the call", "hostile"),
            WriteFault(
                "an exception full of secrets and instructions, after the call", "delivered"
            ),
            WriteFault("the call returns a value that reports failure", "failure_body"),
        ]
        if self.timeout is not None:
            faults.append(WriteFault("the call runs past the adapter's timeout", "delivered"))
        for klass in self._declared_waits():
            faults.append(
                WriteFault(
                    f"{klass.__name__} carrying retry_after=30",
                    "retry_after",
                    timedelta(seconds=30),
                )
            )
            faults.append(
                WriteFault(
                    f"{klass.__name__} carrying a Retry-After HTTP-date (+45 s)",
                    "retry_after",
                    timedelta(seconds=45),
                )
            )
        return faults

    def _raised(self, fault: WriteFault) -> BaseException:
        name = fault.name
        if fault.kind == "retry_after":
            return self._waiting(fault)
        if name.startswith("ConnectionRefusedError"):
            return ConnectionRefusedError(hostile.MARKER)
        if name.startswith("ConnectionResetError"):
            return ConnectionResetError(hostile.MARKER)
        if name.startswith("TimeoutError"):
            return TimeoutError(hostile.MARKER)
        if name.startswith("an unforeseen"):
            return UnforeseenError(hostile.MARKER)
        if "secrets" in name:
            return hostile.HostileError()
        return UnforeseenError(hostile.MARKER)

    def _waiting(self, fault: WriteFault) -> BaseException:
        """A declared after_delay exception carrying the fault's Retry-After."""
        name = fault.name
        for klass in self._declared_waits():
            if name.startswith(f"{klass.__name__} carrying"):
                seconds = int((fault.wait or timedelta(0)).total_seconds())
                error = klass(hostile.MARKER)
                if "HTTP-date" in name:
                    headers = dict(_retry_headers(seconds, http_date=True))
                    error.headers = headers  # type: ignore[attr-defined]
                else:
                    error.retry_after = seconds  # type: ignore[attr-defined]
                return error
        return UnforeseenError(hostile.MARKER)

    def _around(self, fault: WriteFault, probe: _Probe) -> Any:
        before = fault.kind in ("not_sent", "hostile", "retry_after")
        returns_failure = fault.kind == "failure_body"
        slow = fault.name.startswith("the call runs past")
        raised = None if returns_failure or slow else self._raised(fault)
        stall = (self.timeout or 0) + 1.0

        def around(run: Run) -> object:
            if returns_failure:
                return {
                    "ok": False,
                    "error": {"code": "CONFORMANCE_DECLINED", "message": hostile.TEXT},
                }
            if before and raised is not None:
                raise raised
            probe.value = run()
            probe.completed = True
            if slow:
                time.sleep(stall)
                return probe.value
            assert raised is not None
            raise raised

        return around

    def write(self, data: Mapping[str, Any], ref: str, fault: WriteFault | None) -> Attempt:
        started = datetime.now(UTC)
        if fault is None:
            envelope = call_adapter(self.function_adapter, data, ref)
            return Attempt(envelope, started, datetime.now(UTC), None)
        probe = _Probe()
        try:
            around = self._around(fault, probe)
        except Exception as error:  # a declared type the kit cannot construct
            raise CannotInject(f"cannot construct it ({type(error).__name__})") from None
        adapter = self.function_adapter.wrapped(around, timeout=self.timeout)
        envelope = call_adapter(adapter, data, ref)
        if fault.name.startswith("the call runs past"):
            # The abandoned call finishes in its thread; the kit waits for it.
            deadline = time.monotonic() + (self.timeout or 0) + 5
            while not probe.completed and time.monotonic() < deadline:
                time.sleep(0.05)
        return Attempt(envelope, started, datetime.now(UTC), probe.completed)

    def lookup_faults(self) -> list[LookupFault]:
        faults = [
            LookupFault("lookup raises ConnectionError"),
            LookupFault("lookup raises TimeoutError"),
            LookupFault("lookup raises an unforeseen exception"),
            LookupFault("lookup returns something unreadable"),
        ]
        if self.timeout is not None:
            faults.append(LookupFault("lookup runs past the adapter's timeout"))
        return faults

    def lookup(self, ref: str, fault: LookupFault | None) -> LookupResult:
        if fault is None:
            return call_lookup(self.function_adapter, ref)
        name = fault.name
        stall = (self.timeout or 0) + 1.0

        def around(run: Run) -> object:
            if "ConnectionError" in name:
                raise ConnectionError(hostile.MARKER)
            if "TimeoutError" in name:
                raise TimeoutError(hostile.MARKER)
            if "unforeseen" in name:
                raise UnforeseenError(hostile.MARKER)
            if "unreadable" in name:
                return object()
            value = run()
            time.sleep(stall)
            return value

        return call_lookup(
            self.function_adapter.wrapped(around_lookup=around, timeout=self.timeout), ref
        )


class CannotInject(Exception):
    """The fault cannot be injected into this adapter (the row is skipped)."""


def target_for(adapter: Adapter[Any], base_url: str | None, timeout: float) -> Target:
    if isinstance(adapter, HttpAdapter):
        return HttpTarget(adapter, base_url, timeout)
    if base_url is not None:
        raise ValueError("--base-url applies only to HTTP toolkit adapters")
    if isinstance(adapter, FunctionAdapter):
        return CallTarget(adapter, timeout)
    return Target(adapter)


__all__ = [
    "Attempt",
    "CallTarget",
    "CannotInject",
    "HttpTarget",
    "LookupFault",
    "Target",
    "UnforeseenError",
    "WriteFault",
    "target_for",
]
