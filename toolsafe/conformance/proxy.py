"""A fault-injecting HTTP proxy on 127.0.0.1: real TCP, real HTTP, between an adapter and
its downstream. Each request is passed on, answered in the proxy's place, dropped or held
according to the action in force when it connected; what it did is logged per request."""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Literal
from urllib.parse import urlsplit

Kind = Literal[
    "pass",  # forward and relay the answer
    "answer",  # answer in the service's place; nothing reaches it
    "drop_before",  # read the request, close without forwarding
    "drop_after",  # forward (the service acts), then close without answering
    "status_after",  # forward, then answer `status` instead of the service's answer
    "stall_after",  # forward, then hold the answer until the client gives up (at most
    # `seconds`) and close
]

_MAX_HEAD = 65_536
_MAX_BODY = 8 * 1_048_576


@dataclass(frozen=True)
class Action:
    """What the proxy does with the requests that arrive while it is in force."""

    kind: Kind = "pass"
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0


PASS = Action()


@dataclass
class Seen:
    """One request the proxy handled, and whether it reached the service."""

    method: str
    path: str
    action: Kind
    forwarded: bool = False
    upstream_status: int | None = None
    # What the request carried, for the kit to check where the operation_ref went.
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


@dataclass
class _Connection:
    """One accepted connection: the action it gets, and ``settled`` once its request is
    read, logged and, when passed on, answered by the service (or has failed)."""

    action: Action
    seen: Seen | None = None
    settled: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes


def _read_until(sock: socket.socket, buffer: bytearray, marker: bytes, limit: int) -> bool:
    while marker not in buffer:
        if len(buffer) > limit:
            return False
        chunk = sock.recv(65_536)
        if not chunk:
            return False
        buffer.extend(chunk)
    return True


def _read_body(sock: socket.socket, buffer: bytearray, length: int) -> bytes:
    while len(buffer) < length:
        chunk = sock.recv(65_536)
        if not chunk:
            break
        buffer.extend(chunk)
    return bytes(buffer[:length])


def _read_chunked(sock: socket.socket, buffer: bytearray) -> bytes:
    body = bytearray()
    while True:
        if not _read_until(sock, buffer, b"\r\n", _MAX_HEAD):
            return bytes(body)
        line, _, rest = bytes(buffer).partition(b"\r\n")
        size = int(line.split(b";")[0].strip() or b"0", 16)
        buffer[:] = rest
        if size == 0:
            _read_until(sock, buffer, b"\r\n", _MAX_HEAD)
            return bytes(body)
        body.extend(_read_body(sock, buffer, size + 2)[:size])
        del buffer[: size + 2]
        if len(body) > _MAX_BODY:
            return bytes(body)


def _read_message(sock: socket.socket) -> tuple[str, list[tuple[str, str]], bytes] | None:
    """The start line, headers and body of one HTTP/1.1 message (body by Content-Length,
    chunked, or until close for a response without either)."""
    buffer = bytearray()
    if not _read_until(sock, buffer, b"\r\n\r\n", _MAX_HEAD):
        return None
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    lowered = {name.lower(): value for name, value in headers}
    remainder = bytearray(rest)
    if "chunked" in lowered.get("transfer-encoding", "").lower():
        body = _read_chunked(sock, remainder)
    elif "content-length" in lowered:
        body = _read_body(sock, remainder, min(int(lowered["content-length"]), _MAX_BODY))
    elif lines[0].startswith("HTTP/"):
        while len(remainder) < _MAX_BODY:
            chunk = sock.recv(65_536)
            if not chunk:
                break
            remainder.extend(chunk)
        body = bytes(remainder)
    else:
        body = b""
    return lines[0], headers, body


def _response(
    status: int,
    body: bytes,
    content_type: str,
    headers: tuple[tuple[str, str], ...],
    reason: str = "Injected",
) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}"]
    names = {name.lower() for name, _ in headers}
    if "date" not in names:
        lines.append(f"Date: {format_datetime(datetime.now(UTC), usegmt=True)}")
    lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    lines.extend(f"{name}: {value}" for name, value in headers)
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


class FaultProxy:
    """``with FaultProxy(upstream) as proxy``: ``proxy.url`` for the adapter, ``with
    proxy.acting(action):`` around a call, ``proxy.seen`` for what happened.

    A connection gets the action in force when it is accepted, and :meth:`acting` accepts
    whatever is still queued before it ends; so a request the adapter sent inside the
    block gets the block's action even when the adapter gave up before the proxy picked
    it up, however busy the machine."""

    def __init__(self, upstream: str, *, connect_timeout: float = 5.0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the service URL must be http:// or https://, got {upstream!r}")
        self.upstream_scheme = parts.scheme
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or (443 if parts.scheme == "https" else 80)
        self.upstream_prefix = parts.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.seen: list[Seen] = []
        self._action = PASS
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[_Connection] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.setblocking(False)
        # Readable once the proxy stops: wakes the accept loop and every held answer.
        self._wake, self._waker = socket.socketpair()
        self._accept = threading.Thread(target=self._loop, daemon=True, name="conformance-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}{self.upstream_prefix}"

    def __enter__(self) -> FaultProxy:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._waker.send(b"x")
        self._accept.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=5)
        self._sock.close()
        self._wake.close()
        self._waker.close()

    @contextlib.contextmanager
    def acting(self, action: Action) -> Iterator[list[Seen]]:
        """Apply ``action`` to every request until the block ends; yields the requests
        handled meanwhile, filled in when the block ends, once each of them was read and,
        when passed on, answered by the service (so ``forwarded`` and ``upstream_status``
        are final)."""
        with self._lock:
            start = len(self._connections)
            self._action = action
        handled: list[Seen] = []
        try:
            yield handled
        finally:
            with self._lock:
                self._take(action)
                self._action = PASS
                mine = self._connections[start:]
            for connection in mine:
                connection.settled.wait()
            handled.extend(c.seen for c in mine if c.seen is not None)

    def _loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while not self._stop.is_set():
                selector.select()
                if self._stop.is_set():
                    return
                try:
                    with self._lock:
                        self._take(self._action)
                except OSError:  # the listening socket is gone
                    return

    def _take(self, action: Action) -> None:
        """Accept every queued connection and serve it under ``action`` (lock held)."""
        while True:
            try:
                client, _ = self._sock.accept()
            except BlockingIOError:  # none queued
                return
            except ConnectionAbortedError:  # reset by the client before it was accepted
                continue
            connection = _Connection(action)
            self._connections.append(connection)
            thread = threading.Thread(target=self._serve, args=(client, connection), daemon=True)
            self._threads = [alive for alive in self._threads if alive.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket, connection: _Connection) -> None:
        action = connection.action
        try:
            client.settimeout(30)
            message = _read_message(client)
            if message is None:
                return
            start, headers, body = message
            method, _, rest = start.partition(" ")
            target, _, version = rest.partition(" ")
            seen = Seen(method, target, action.kind, headers=tuple(headers), body=body)
            with self._lock:
                self.seen.append(seen)
            connection.seen = seen
            request = _Request(method, target, version, headers, body)
            self._carry_out(client, request, connection, seen)
        except OSError:
            pass
        finally:
            connection.settled.set()
            with contextlib.suppress(OSError):
                client.close()

    def _carry_out(
        self, client: socket.socket, request: _Request, connection: _Connection, seen: Seen
    ) -> None:
        action = connection.action
        if action.kind == "answer":
            client.sendall(
                _response(action.status, action.body, action.content_type, action.headers)
            )
            return
        if action.kind == "drop_before":
            return
        answer = self._forward(request, seen)
        connection.settled.set()
        if action.kind == "pass":
            if answer is not None:
                client.sendall(answer)
            return
        if action.kind == "status_after":
            page = f"<html><body><h1>{action.status} Bad Gateway</h1></body></html>".encode()
            client.sendall(_response(action.status, page, "text/html", action.headers))
            return
        if action.kind == "stall_after":
            self._hold(client, action.seconds)
        # drop_after, and a stall once held: close without an answer.

    def _hold(self, client: socket.socket, seconds: float) -> None:
        """Keep ``client`` waiting for an answer until it gives up (closes its end), the
        proxy stops, or ``seconds`` pass: a stall costs the client's own timeout, and one
        that never gives up finds the connection closed."""
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                ready = {key.fileobj for key, _ in selector.select(left)}
                if not ready or self._wake in ready or not client.recv(65_536):
                    return

    def _forward(self, request: _Request, seen: Seen) -> bytes | None:
        """Send the request to the service and return its raw answer (None: none came)."""
        upstream = socket.create_connection(
            (self.upstream_host, self.upstream_port), timeout=self.connect_timeout
        )
        try:
            if self.upstream_scheme == "https":
                context = ssl.create_default_context()
                upstream = context.wrap_socket(upstream, server_hostname=self.upstream_host)
            upstream.settimeout(60)
            host = self.upstream_host
            if self.upstream_port not in (80, 443):
                host = f"{host}:{self.upstream_port}"
            skip = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}
            lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {host}"]
            lines.extend(f"{n}: {v}" for n, v in request.headers if n.lower() not in skip)
            lines.append(f"Content-Length: {len(request.body)}")
            lines.append("Connection: close")
            upstream.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + request.body)
            seen.forwarded = True
            reply = _read_message(upstream)
        finally:
            with contextlib.suppress(OSError):
                upstream.close()
        if reply is None:
            return None
        status_line, headers, body = reply
        try:
            seen.upstream_status = int(status_line.split(" ")[1])
        except (IndexError, ValueError):
            seen.upstream_status = None
        skip = {"connection", "keep-alive", "transfer-encoding", "content-length"}
        kept = tuple((n, v) for n, v in headers if n.lower() not in skip)
        content_type = next((v for n, v in kept if n.lower() == "content-type"), "text/plain")
        rest = tuple((n, v) for n, v in kept if n.lower() != "content-type")
        return _response(seen.upstream_status or 502, body, content_type, rest, "Relayed")


def refused_url() -> tuple[str, socket.socket]:
    """A URL whose port is bound but not listening, so connecting is refused for as long
    as the returned socket stays open (close it when done)."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    return f"http://127.0.0.1:{holder.getsockname()[1]}", holder


__all__ = ["PASS", "Action", "FaultProxy", "Seen", "refused_url"]
