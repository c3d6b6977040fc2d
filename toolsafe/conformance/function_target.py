"""A ``@tool`` function under test: its calls wrapped to raise before or after the real
call (builtin network errors, and each exception type its ``errors=`` declares), to
return a failure or a queued job, or to run past its timeout; and, when its settings
name its target, its real requests sent through the fault proxy as well."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from toolsafe.adapters import codes
from toolsafe.adapters.calls import Run
from toolsafe.adapters.function import FunctionAdapter, Raised
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.protocol import LookupResult
from toolsafe.adapters.sending import KeyPlace
from toolsafe.conformance import hostile
from toolsafe.conformance.proxy import PASS, Action, FaultProxy, Seen, refused_url
from toolsafe.conformance.targets import (
    SLOW_ANSWER_TIMEOUT,
    Attempt,
    CannotInject,
    LookupFault,
    Target,
    WriteFault,
    acted,
    retry_headers,
    wire_action,
    wire_faults,
)

Rebuild = Callable[[str], FunctionAdapter]
_QUEUED = 'the call returns {"status": "queued", "id": "job_1"} (nothing stored)'
# The scenarios in which the kit holds the real call past the adapter's (short) timeout.
_CALL_RUNS_PAST = "the call runs past the adapter's timeout"
_LOOKUP_RUNS_PAST = "lookup runs past the adapter's timeout"
_WIRE_LOOKUPS: tuple[tuple[str, Action], ...] = (
    ("lookup: 503 from the service (an HTML page)",
     Action("answer", status=503, body=b"<html>down</html>", content_type="text/html")),
    ("lookup: 404 from a proxy (no body)", Action("answer", status=404, content_type="text/plain")),
    ('lookup: 404 from a missing route ({"error": "not_found"})',
     Action("answer", status=404, body=b'{"error": "not_found"}')),
    ("lookup: connection dropped", Action("drop_before")),
)  # fmt: skip


class UnforeseenError(Exception):
    """An exception type no adapter can have declared."""


@dataclass
class _Probe:
    """Records whether the real call ran to its end inside a wrapper (``ended`` once it
    returned or raised); ``released`` lets a call held past its timeout return once the
    adapter has given up on it."""

    completed: bool = False
    value: object = None
    ended: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


def construct(klass: type[BaseException]) -> BaseException:
    """An instance of a declared exception type, its text the planted marker; without
    calling an ``__init__`` that needs arguments the kit cannot know."""
    try:
        return klass(hostile.MARKER)
    except Exception:  # an __init__ with required arguments: build it without one
        made = None
    try:
        made = klass.__new__(klass)
        BaseException.__init__(made, hostile.MARKER)
    except Exception as error:
        raise CannotInject(f"cannot construct {klass.__name__} ({type(error).__name__})") from None
    return made


class CallTarget(Target):
    """A :class:`FunctionAdapter`; through the proxy when ``upstream`` and ``rebuild``
    (an adapter of the same tool with its settings' target replaced) are given."""

    kind = "function"
    note = ""

    def __init__(
        self,
        adapter: FunctionAdapter,
        timeout: float,
        upstream: str | None = None,
        rebuild: Rebuild | None = None,
    ) -> None:
        super().__init__(adapter)
        self.original = adapter
        self.proxy: FaultProxy | None = None
        self.refused: FunctionAdapter | None = None
        self._holder = None
        if upstream is not None and rebuild is not None:
            self.proxy = FaultProxy(upstream).__enter__()
            adapter = rebuild(self.proxy.url)
            dead, self._holder = refused_url()
            self.refused = rebuild(dead)
        self.function_adapter = adapter
        self.adapter = adapter
        self.timeout = None if adapter.timeout is None else min(adapter.timeout, timeout)
        # The timeout of the calls the kit holds past it (targets.SLOW_ANSWER_TIMEOUT).
        self.slow_timeout = None if self.timeout is None else min(self.timeout, SLOW_ANSWER_TIMEOUT)
        # The longest a call (or the proxy, an answer) is held for an adapter that never
        # gives up; a held call returns as soon as the adapter has.
        self.stall = (self.timeout or timeout) + 1.5

    @property
    def max_retry_after(self) -> timedelta:
        return self.function_adapter.max_retry_after

    @property
    def key_place(self) -> KeyPlace | None:
        return self.original.idempotency_place if self.proxy is not None else None

    def _declared_waits(self) -> list[type[BaseException]]:
        found = []
        for klass, entry in self.function_adapter.errors.items():
            code = entry.code if isinstance(entry, Raised) else entry
            if codes.spec_for(code).directive == "after_delay":
                found.append(klass)
        return found

    def _declared(self) -> list[WriteFault]:
        """Each declared exception type, raised after the call reached the downstream
        (before it, for a type declared ``before_send``)."""
        adapter = self.function_adapter
        found = []
        for klass in adapter.errors:
            if adapter.before_send and issubclass(klass, adapter.before_send):
                name = f"{klass.__name__} raised before the call (declared before_send)"
                found.append(WriteFault(name, "not_sent", raised=klass))
            elif adapter.writes:
                name = f"{klass.__name__} raised after the call reached the downstream"
                found.append(WriteFault(name, "declared_after", raised=klass))
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
            WriteFault(_QUEUED, "no_evidence"),
            *self._declared(),
        ]
        if self.timeout is not None:
            faults.append(WriteFault(_CALL_RUNS_PAST, "delivered"))
        for klass in self._declared_waits():
            faults.append(
                WriteFault(
                    f"{klass.__name__} carrying retry_after=30",
                    "retry_after",
                    timedelta(seconds=30),
                    raised=klass,
                )
            )
            faults.append(
                WriteFault(
                    f"{klass.__name__} carrying a Retry-After HTTP-date (+45 s)",
                    "retry_after",
                    timedelta(seconds=45),
                    raised=klass,
                )
            )
        if self.proxy is not None:
            faults += [WriteFault(f"wire: {f.name}", f.kind) for f in wire_faults()]
        return faults

    def _raised(self, fault: WriteFault) -> BaseException:
        name = fault.name
        if fault.kind == "retry_after":
            return self._waiting(fault)
        if fault.raised is not None:
            return construct(fault.raised)
        if name.startswith("ConnectionRefusedError"):
            return ConnectionRefusedError(hostile.MARKER)
        if name.startswith("ConnectionResetError"):
            return ConnectionResetError(hostile.MARKER)
        if name.startswith("TimeoutError"):
            return TimeoutError(hostile.MARKER)
        if "secrets" in name:
            return hostile.HostileError()
        return UnforeseenError(hostile.MARKER)

    def _waiting(self, fault: WriteFault) -> BaseException:
        """A declared after_delay exception carrying the fault's Retry-After."""
        assert fault.raised is not None
        seconds = int((fault.wait or timedelta(0)).total_seconds())
        error = construct(fault.raised)
        if "HTTP-date" in fault.name:
            error.headers = dict(retry_headers(seconds, http_date=True))  # type: ignore[attr-defined]
        else:
            error.retry_after = seconds  # type: ignore[attr-defined]
        return error

    def _around(self, fault: WriteFault, probe: _Probe) -> Any:
        before = fault.kind in ("not_sent", "hostile", "retry_after")
        returned: object = None
        if fault.kind == "failure_body":
            returned = {
                "ok": False,
                "error": {"code": "CONFORMANCE_DECLINED", "message": hostile.TEXT},
            }
        elif fault.kind == "no_evidence":
            returned = {"status": "queued", "id": "job_1"}
        slow = fault.name == _CALL_RUNS_PAST
        raised = None if returned is not None or slow else self._raised(fault)

        def around(run: Run) -> object:
            if returned is not None:
                return returned
            if before and raised is not None:
                raise raised
            try:
                probe.value = run()
                probe.completed = True
            finally:
                probe.ended.set()
            if slow:
                probe.released.wait(self.stall)
                return probe.value
            assert raised is not None
            raise raised

        return around

    def _call(self, adapter: FunctionAdapter, data: Mapping[str, Any], ref: str,
              action: Action) -> tuple[Any, list[Seen] | None]:  # fmt: skip
        if self.proxy is None:
            return call_adapter(adapter, data, ref), None
        with self.proxy.acting(action) as seen:
            envelope = call_adapter(adapter, data, ref)
        return envelope, list(seen)

    def write(self, data: Mapping[str, Any], ref: str, fault: WriteFault | None) -> Attempt:
        started = datetime.now(UTC)
        if fault is None:
            envelope, seen = self._call(self.function_adapter, data, ref, PASS)
            return Attempt(envelope, started, datetime.now(UTC), None, seen)
        if fault.name.startswith("wire: "):
            return self._wire(data, ref, fault, started)
        probe = _Probe()
        around = self._around(fault, probe)
        slow = fault.name == _CALL_RUNS_PAST
        timeout = self.slow_timeout if slow else self.timeout
        adapter = self.function_adapter.wrapped(around, timeout=timeout)
        envelope, seen = self._call(adapter, data, ref, PASS)
        probe.released.set()
        if slow:
            # The abandoned call finishes in its thread; the kit waits for it.
            probe.ended.wait((self.timeout or 0) + 5)
        return Attempt(envelope, started, datetime.now(UTC), probe.completed, seen)

    def _wire(self, data: Mapping[str, Any], ref: str, fault: WriteFault,
              started: datetime) -> Attempt:  # fmt: skip
        if fault.kind == "not_sent" and self.refused is not None:
            envelope = call_adapter(self.refused, data, ref)
            return Attempt(envelope, started, datetime.now(UTC), False)
        inner = WriteFault(fault.name.removeprefix("wire: "), fault.kind)
        envelope, seen = self._call(
            self.function_adapter, data, ref, wire_action(inner, self.stall)
        )
        return Attempt(envelope, started, datetime.now(UTC), acted(seen or []), seen)

    def lookup_faults(self) -> list[LookupFault]:
        faults = [
            LookupFault("lookup raises ConnectionError"),
            LookupFault("lookup raises TimeoutError"),
            LookupFault("lookup raises an unforeseen exception"),
            LookupFault("lookup returns something unreadable"),
        ]
        if self.timeout is not None:
            faults.append(LookupFault(_LOOKUP_RUNS_PAST))
        if self.proxy is not None:
            faults += [LookupFault(name, "404" in name) for name, _ in _WIRE_LOOKUPS]
        return faults

    def lookup(self, ref: str, fault: LookupFault | None) -> LookupResult:
        if fault is None:
            return call_lookup(self.function_adapter, ref)
        name = fault.name
        for wire_name, action in _WIRE_LOOKUPS:
            if name == wire_name and self.proxy is not None:
                with self.proxy.acting(action):
                    return call_lookup(self.function_adapter, ref)

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
            released.wait(self.stall)
            return value

        released = threading.Event()
        timeout = self.slow_timeout if name == _LOOKUP_RUNS_PAST else self.timeout
        try:
            return call_lookup(
                self.function_adapter.wrapped(around_lookup=around, timeout=timeout), ref
            )
        finally:
            released.set()

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
        if self._holder is not None:
            self._holder.close()


__all__ = ["CallTarget", "Rebuild", "UnforeseenError", "construct"]
