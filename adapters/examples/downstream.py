"""The example downstream service: invoices and e-mails over HTTP with idempotency keys,
lookup by operation_ref, injectable faults and effect counting (docs/example-service.md).

Run it with ``python -m toolsafe.adapters.examples.downstream --port 8900 [--naive]``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from toolsafe.adapters.examples.downstream_state import (
    AFTER_STORE,
    APPROVAL_HEADER,
    BEFORE_STORE,
    FAULTS,
    MAX_BODY,
    RESOURCES,
    Fault,
    Record,
    State,
    payload_hash,
    validate_payload,
)

__all__ = ["FAULTS", "DownstreamService", "State", "main"]


class _Dropped(Exception):
    """The handler closes the connection without answering."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, each keep-alive
    # response would wait for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server: DownstreamHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines would go to stderr of every test run; the effect counts are the log.
        return

    # --- plumbing -------------------------------------------------------------------
    def _send(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None,
        raw: bytes | None = None, content_type: str = "application/json",
    ) -> None:  # fmt: skip
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(self, status: int, code: str, field: str | None = None, **extra: Any) -> None:
        error: dict[str, Any] = {"code": code}
        if field:
            error["field"] = field
        self._send(status, {"error": error}, headers=extra.get("headers"))

    def _drop(self) -> None:
        self.close_connection = True
        raise _Dropped

    def _read_json(self) -> dict[str, Any] | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._error(400, "BAD_CONTENT_LENGTH")
            return None
        if length > MAX_BODY:
            self._error(413, "BODY_TOO_LARGE")
            return None
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "MALFORMED_JSON")
            return None
        if not isinstance(body, dict):
            self._error(400, "MALFORMED_JSON")
            return None
        return body

    def _stall(self, fault: Fault) -> None:
        if self.server.stopping.wait(float(fault.params.get("seconds", 30))):
            # Stopping: the client gets no answer, as if the process had died.
            self._drop()

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        return parts.path.rstrip("/") or "/", parse_qs(parts.query)

    def _dispatch(self, action: Any) -> None:
        self.clock_skew = 0.0
        try:
            action()
        except _Dropped:
            return
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch(self._get)

    def do_POST(self) -> None:
        self._dispatch(self._post)

    def do_DELETE(self) -> None:
        self._dispatch(self._delete)

    # --- routes ---------------------------------------------------------------------
    def _get(self) -> None:
        path, query = self._route()
        state = self.server.state
        if path == "/_control/effects":
            resource = query.get("resource", [None])[0]
            with state.lock:
                counts = state.effects_by_resource.get(resource) if resource else state.effects
                snapshot = dict(counts or {})
            self._send(200, snapshot)
            return
        if path == "/_control/deduplicated":
            with state.lock:
                snapshot = dict(state.deduplicated)
            self._send(200, snapshot)
            return
        if path == "/_control/faults":
            with state.lock:
                listed = [f.as_json() for f in state.faults]
            self._send(200, listed)
            return
        if path == "/_control/health":
            self._send(200, {"ok": True, "naive": state.naive})
            return
        resource = path.strip("/")
        if resource in RESOURCES:
            self._lookup(resource, query.get("operation_ref", [None])[0])
            return
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "search" and parts[1] in RESOURCES:
            self._lookup(parts[1], query.get("operation_ref", [None])[0], listing=True)
            return
        if len(parts) == 3 and parts[0] in RESOURCES and parts[1] == "by-ref":
            self._lookup(parts[0], unquote(parts[2]) or None)
            return
        self._error(404, "NOT_FOUND")

    def _lookup(self, resource: str, ref: str | None, *, listing: bool = False) -> None:
        state = self.server.state
        if not ref:
            self._error(400, "MISSING_OPERATION_REF", "operation_ref")
            return
        state.saw_trace(ref, self.headers.get("traceparent"))
        fault = state.take_fault(frozenset({"lookup_down"}), resource, ref)
        if fault is not None:
            asked = fault.params.get("retry_after")
            headers = {"Retry-After": str(int(asked))} if asked is not None else None
            self._send(503, raw=b"<html><body>lookup unavailable</body></html>",
                       headers=headers, content_type="text/html")  # fmt: skip
            return
        now = datetime.now(UTC)
        with state.lock:
            found = [
                r for r in state.records[resource] if r.operation_ref == ref and r.visible_at <= now
            ]
        if listing:
            # The list shape: every record the filter matches, [] when there is none.
            self._send(200, [record.as_json() for record in found])
            return
        if not found:
            self._error(404, "NOT_FOUND")
            return
        self._send(200, {"record": found[0].as_json(), "count": len(found)})

    def _delete(self) -> None:
        path, _ = self._route()
        if path == "/_control/faults":
            with self.server.state.lock:
                self.server.state.faults.clear()
            self._send(200, {"ok": True})
            return
        self._error(404, "NOT_FOUND")

    def _post(self) -> None:
        path, _ = self._route()
        state = self.server.state
        body = self._read_json()
        if body is None:
            return
        if path == "/_control/faults":
            try:
                fault = state.add_fault(body)
            except ValueError as error:
                self._send(400, {"error": {"code": "BAD_FAULT", "message": str(error)}})
                return
            self._send(201, fault.as_json())
            return
        if path == "/_control/reset":
            state.reset()
            self._send(200, {"ok": True})
            return
        resource = path.strip("/")
        if resource in RESOURCES:
            self._write(resource, body)
            return
        self._error(404, "NOT_FOUND")

    def _write(self, resource: str, payload: dict[str, Any]) -> None:
        state = self.server.state
        ref = self.headers.get("Idempotency-Key") or None
        state.saw_trace(ref, self.headers.get("traceparent"))
        approval = self.headers.get(APPROVAL_HEADER) or None
        before = state.take_fault(BEFORE_STORE - {"require_approval"}, resource, ref)
        if before is None and approval is None:
            before = state.take_fault(frozenset({"require_approval"}), resource, ref)
        if before is not None and self._before_store(before):
            return
        problem = validate_payload(resource, payload)
        if problem is not None:
            self._error(422, problem[0], problem[1])
            return
        digest = payload_hash(payload)
        delay = 0.0
        consistency = state.take_fault(frozenset({"eventual_consistency"}), resource, ref)
        if consistency is not None:
            delay = float(consistency.params.get("seconds", 2))
        now = datetime.now(UTC)
        with state.lock:
            key = (resource, ref) if ref and not state.naive else None
            if key is not None and key in state.in_flight:
                state.deduplicated[key[1]] += 1
                self._error(409, "IDEMPOTENCY_KEY_IN_FLIGHT")
                return
            existing = state.by_key.get(key) if key else None
            if existing is not None and existing.payload_hash != digest:
                self._error(422, "IDEMPOTENCY_KEY_REUSED")
                return
            if existing is None:
                record = Record(
                    f"{resource[:3]}_{state.next_record:06d}", resource, ref, payload, digest,
                    now, now + timedelta(seconds=delay), approval,
                )  # fmt: skip
                state.next_record += 1
                state.records[resource].append(record)
                if key is not None:
                    state.by_key[key] = record
                state.effects[ref or "-"] += 1
                state.effects_by_resource[resource][ref or "-"] += 1
                status, replayed = 201, False
            else:
                state.deduplicated[existing.operation_ref or "-"] += 1
                record, status, replayed = existing, 200, True
        after = state.take_fault(AFTER_STORE, resource, ref)
        if after is not None and self._after_store(after):
            return
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        self._send(status, {"record": record.as_json()}, headers=headers)

    def date_time_string(self, timestamp: float | None = None) -> str:
        # The Date header follows the simulated clock, so that clients must read
        # an HTTP-date Retry-After against it rather than against their own clock.
        skew = getattr(self, "clock_skew", 0.0)
        return format_datetime(datetime.now(UTC) + timedelta(seconds=skew), usegmt=True)

    def _retry_after(self, fault: Fault) -> dict[str, str]:
        seconds = int(fault.params.get("retry_after", 1))
        self.clock_skew = float(fault.params.get("clock_skew", 0))
        if fault.params.get("http_date"):
            server_now = datetime.now(UTC) + timedelta(seconds=self.clock_skew)
            when = server_now + timedelta(seconds=seconds)
            return {"Retry-After": format_datetime(when, usegmt=True)}
        return {"Retry-After": str(seconds)}

    def _before_store(self, fault: Fault) -> bool:
        """Carry out a fault that strikes before the write; ``True`` when it answered."""
        name = fault.fault
        if name == "rate_limit":
            self._error(429, "RATE_LIMITED", headers=self._retry_after(fault))
        elif name == "unavailable":
            self._send(503, raw=b"<html><body>503 Service Unavailable</body></html>",
                       headers=self._retry_after(fault), content_type="text/html")  # fmt: skip
        elif name == "version_conflict":
            self._error(409, "VERSION_CONFLICT")
        elif name == "require_approval":
            self._error(403, "MISSING_APPROVAL")
        elif name == "drop_before_store":
            self._drop()
        elif name == "stall_before_store":
            return self._stall_then_store(fault)
        return True

    def _stall_then_store(self, fault: Fault) -> bool:
        # Holds the key "in flight" so that a concurrent duplicate sees 409 meanwhile.
        state = self.server.state
        ref = self.headers.get("Idempotency-Key")
        if not ref or state.naive:
            self._stall(fault)
            return False
        key = (self._route()[0].strip("/"), ref)
        with state.lock:
            if key in state.in_flight:
                state.deduplicated[ref] += 1
                self._error(409, "IDEMPOTENCY_KEY_IN_FLIGHT")
                return True
            state.in_flight[key] = ref
        try:
            self._stall(fault)
        finally:
            with state.lock:
                state.in_flight.pop(key, None)
        return False

    def _after_store(self, fault: Fault) -> bool:
        name = fault.fault
        if name == "stall_after_store":
            self._stall(fault)
            return False
        if name == "error_after_store":
            status = int(fault.params.get("status", 502))
            page = f"<html><body><h1>{status} {HTTPStatus(status).phrase}</h1></body></html>"
            self._send(status, raw=page.encode(), content_type="text/html")
        elif name == "drop_after_store":
            self._drop()
        elif name == "respond":
            headers = {str(k): str(v) for k, v in dict(fault.params.get("headers", {})).items()}
            raw = str(fault.params.get("body", "")).encode()
            content_type = str(fault.params.get("content_type", "application/json"))
            self._send(int(fault.params.get("status", 200)), raw=raw, headers=headers,
                       content_type=content_type)  # fmt: skip
        return True


class DownstreamHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Concurrent-duplicate tests open dozens of connections at once; the default
    # backlog of 5 would refuse some before the server ever saw them.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], state: State) -> None:
        super().__init__(address, Handler)
        self.state = state
        self.stopping = threading.Event()


class DownstreamService:
    """The service in a background thread: ``start()``, ``url``, ``stop()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, naive: bool = False) -> None:
        self.state = State(naive=naive)
        self._server = DownstreamHTTPServer((host, port), self.state)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> DownstreamService:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> DownstreamService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def traceparents(self, operation_ref: str) -> list[str]:
        """The W3C ``traceparent`` headers the requests for ``operation_ref`` carried."""
        with self.state.lock:
            return list(self.state.traceparents.get(operation_ref, ()))

    def effects(self, resource: str | None = None) -> dict[str, int]:
        with self.state.lock:
            counts = self.state.effects_by_resource[resource] if resource else self.state.effects
            return dict(counts)

    def deduplicated(self) -> dict[str, int]:
        """Requests per operation_ref that the key deduplicated (none when naive)."""
        with self.state.lock:
            return dict(self.state.deduplicated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--naive", action="store_true", help="ignore Idempotency-Key")
    args = parser.parse_args(argv)
    service = DownstreamService(args.host, args.port, naive=args.naive)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    service.start()
    print(service.url, flush=True)
    while not stop.wait(0.5):
        pass
    service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
