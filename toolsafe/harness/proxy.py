"""A fault proxy: real TCP on loopback between one process and a server (PostgreSQL,
Redis), forwarding both directions until told to black-hole, delay or heal.

A black-hole is a partition, not a refusal: new connections are still accepted (the
kernel completes the handshake, as a route that drops packets after the SYN would look
to a client already connected), nothing is forwarded and nothing is answered, in either
direction, and no connection is reset. What was sent meanwhile waits in the proxy (and
in the kernel's buffers) and goes through when the partition heals, as TCP's
retransmissions would deliver it; a client that gave up and closed its socket meanwhile
has its close forwarded after the heal. A delay holds every chunk for that many seconds
before forwarding it. See docs/harness.md.

One thread per proxy, ``selectors`` underneath; the commands are thread-safe.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

CHUNK: Final = 65536
BUFFERED: Final = 4 * 1024 * 1024  # per direction: stop reading past this
TICK: Final = 0.02  # seconds: how often a waiting loop looks at delays and commands


@dataclass
class _Direction:
    """One direction of a connection: chunks read and not yet written, each with the
    monotonic time it may leave, and whether its source has closed."""

    chunks: deque[tuple[float, bytes]] = field(default_factory=deque)
    size: int = 0
    closed: bool = False

    def ready(self, now: float) -> bool:
        return bool(self.chunks) and self.chunks[0][0] <= now


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket | None = None
    up: _Direction = field(default_factory=_Direction)  # client → upstream
    down: _Direction = field(default_factory=_Direction)  # upstream → client


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:<port>`` to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], *, name: str = "proxy") -> None:
        self.upstream = upstream
        self.name = name
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._pairs: list[_Pair] = []
        self._events: dict[socket.socket, int] = {}  # what each socket is registered for
        self._lock = threading.Lock()
        self._blackholed = False
        self._delay = 0.0
        self._stopping = False
        self.accepted = 0  # connections accepted since the start
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{name}", daemon=True)

    # ------------------------------------------------------------------ commands

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def blackhole(self) -> None:
        """Forward nothing and answer nothing, both directions; keep every connection."""
        with self._lock:
            self._blackholed = True

    def delay(self, seconds: float) -> None:
        """Forward each chunk ``seconds`` after it arrived (0: no delay)."""
        with self._lock:
            self._delay = max(0.0, seconds)

    def heal(self) -> None:
        """Forward again: what waited goes through, then everything new; no delay."""
        with self._lock:
            self._blackholed = False
            self._delay = 0.0

    @property
    def blackholed(self) -> bool:
        with self._lock:
            return self._blackholed

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._pairs)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's (user, path, query kept)."""
        parts = urlsplit(url)
        userinfo, at, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}{at}127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def close(self) -> None:
        """Stop the thread and close every connection and the listener."""
        with self._lock:
            self._stopping = True
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for pair in self._pairs:
            self._drop(pair)
        self._pairs.clear()
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._listener.close()
        self._selector.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                blackholed, delay = self._blackholed, self._delay
            now = time.monotonic()
            if not blackholed:
                for pair in list(self._pairs):
                    if pair.upstream is None:
                        self._connect(pair)
            self._plan(blackholed, now)
            for key, events in self._selector.select(timeout=TICK):
                if key.fileobj is self._listener:
                    self._accept(blackholed)
                    continue
                pair, side = key.data
                if events & selectors.EVENT_READ:
                    self._read(pair, side, now + delay)
                if events & selectors.EVENT_WRITE:
                    self._write(pair, side, time.monotonic())
            self._reap()

    def _accept(self, blackholed: bool) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client)
        with self._lock:
            self._pairs.append(pair)
            self.accepted += 1
        if not blackholed:
            self._connect(pair)

    def _connect(self, pair: _Pair) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            pair.up.closed = pair.down.closed = True  # the server is down: close the client
            pair.up.chunks.clear()
            pair.up.size = 0
            return
        upstream.setblocking(False)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair.upstream = upstream

    def _plan(self, blackholed: bool, now: float) -> None:
        """What each socket waits for: nothing at all while black-holed."""
        for pair in self._pairs:
            for sock, side, source, sink in (
                (pair.client, "client", pair.up, pair.down),
                (pair.upstream, "upstream", pair.down, pair.up),
            ):
                if sock is None:
                    continue
                events = 0
                if not blackholed:
                    if not source.closed and source.size < BUFFERED:
                        events |= selectors.EVENT_READ
                    if sink.ready(now):
                        events |= selectors.EVENT_WRITE
                self._watch(sock, events, (pair, side))

    def _watch(self, sock: socket.socket, events: int, data: tuple[_Pair, str]) -> None:
        current = self._events.get(sock, 0)
        if events == current:
            return
        if not events:
            self._selector.unregister(sock)
            del self._events[sock]
        elif not current:
            self._selector.register(sock, events, data)
            self._events[sock] = events
        else:
            self._selector.modify(sock, events, data)
            self._events[sock] = events

    def _read(self, pair: _Pair, side: str, leaves_at: float) -> None:
        sock = pair.client if side == "client" else pair.upstream
        direction = pair.up if side == "client" else pair.down
        assert sock is not None
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            direction.closed = True
            return
        direction.chunks.append((leaves_at, data))
        direction.size += len(data)

    def _write(self, pair: _Pair, side: str, now: float) -> None:
        sock = pair.client if side == "client" else pair.upstream
        direction = pair.down if side == "client" else pair.up
        assert sock is not None
        while direction.ready(now):
            leaves_at, data = direction.chunks[0]
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                direction.chunks.clear()
                direction.size = 0
                pair.up.closed = pair.down.closed = True
                return
            direction.size -= sent
            if sent < len(data):
                direction.chunks[0] = (leaves_at, data[sent:])
                return
            direction.chunks.popleft()

    def _reap(self) -> None:
        """Close a connection once a side closed and what it sent was delivered (never
        while black-holed: a close is news the other side must not get yet)."""
        if self.blackholed:
            return
        for pair in list(self._pairs):
            finished = (pair.up.closed and not pair.up.chunks) or (
                pair.down.closed and not pair.down.chunks
            )
            if finished:
                self._drop(pair)
                with self._lock:
                    self._pairs.remove(pair)

    def _drop(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.upstream):
            if sock is None:
                continue
            if self._events.pop(sock, 0):
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()


class Partition:
    """Fault proxies for one process: one per database server (a libpq multi-host URL,
    ``h1:p1,h2:p2`` or ``?host=h1,h2&port=p1,p2``, gets one per host, so the process
    still follows a failover to whichever server takes writes) and one to the broker.
    Its settings point at the proxies (``env``); ``cut``/``heal`` black-hole and heal
    them all at once."""

    def __init__(self, database_url: str, broker_url: str) -> None:
        self.database_url = database_url
        self.broker_url = broker_url
        self.databases = [
            FaultProxy(address, name=f"database{number}").start()
            for number, address in enumerate(database_addresses(database_url))
        ]
        self.broker = FaultProxy(_address(broker_url, 6379), name="broker").start()

    @property
    def proxies(self) -> list[FaultProxy]:
        return [*self.databases, self.broker]

    def env(self) -> dict[str, str]:
        """``TOOLSAFE_DATABASE_URL`` and ``TOOLSAFE_BROKER_URL`` through the proxies."""
        ports = [proxy.port for proxy in self.databases]
        return {
            "TOOLSAFE_DATABASE_URL": through_proxies(self.database_url, ports),
            "TOOLSAFE_BROKER_URL": self.broker.url(self.broker_url),
        }

    @property
    def blackholed(self) -> bool:
        """Whether every proxy is black-holed now (cut and not healed)."""
        return all(proxy.blackholed for proxy in self.proxies)

    def cut(self) -> None:
        for proxy in self.proxies:
            proxy.blackhole()

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


PG_PORT: Final = 5432
_AUTHORITY = re.compile(r"^(?P<scheme>[^:/?#]+://)(?P<authority>[^/?#]*)(?P<rest>.*)$", re.S)


def database_addresses(url: str) -> list[tuple[str, int]]:
    """The (host, port) of every server a database URL names, in order: one for a plain
    URL, each host of a libpq multi-host URL (``h1:p1,h2:p2`` in the authority, or
    ``host=h1,h2&port=p1,p2`` in the query; a missing port is 5432)."""
    match = _AUTHORITY.match(url)
    if match is None:
        raise ValueError(f"not a database URL with a server: {url!r}")
    authority = match["authority"].rpartition("@")[2]
    if "," in authority:
        return [_host_port(entry) for entry in authority.split(",")]
    query = parse_qs(urlsplit(url).query)
    if "host" in query:
        hosts = query["host"][-1].split(",")
        ports = query.get("port", [""])[-1].split(",")
        if len(ports) == 1:
            ports = ports * len(hosts)
        if len(ports) != len(hosts):
            raise ValueError(f"{len(hosts)} hosts and {len(ports)} ports in {url!r}")
        pairs = zip(hosts, ports, strict=True)
        return [(host, int(port) if port else PG_PORT) for host, port in pairs]
    return [_address(url, PG_PORT)]


def through_proxies(url: str, ports: list[int]) -> str:
    """``url`` with its servers replaced, in order, by ``127.0.0.1:<port>`` of each proxy
    (user, path and the rest of the query kept; several become the authority form)."""
    match = _AUTHORITY.match(url)
    if match is None:
        raise ValueError(f"not a database URL with a server: {url!r}")
    userinfo, at, _ = match["authority"].rpartition("@")
    path, _, query = match["rest"].partition("?")
    kept = [
        (key, value)
        for key, value in parse_qsl(query, keep_blank_values=True)
        if key not in {"host", "port"}
    ]
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    rest = f"{path}?{urlencode(kept, safe=',')}" if kept else path
    return f"{match['scheme']}{userinfo}{at}{hosts}{rest}"


def _host_port(entry: str) -> tuple[str, int]:
    host, colon, port = entry.rpartition(":")
    if not colon or not port.isdigit():  # no port, or a bare [IPv6]
        host, port = entry, ""
    return host.removeprefix("[").removesuffix("]") or "127.0.0.1", int(port or PG_PORT)


def _address(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port
