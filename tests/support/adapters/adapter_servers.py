"""Scriptable raw-socket HTTP servers on 127.0.0.1 for classification tests: each
connection is handed to a behaviour that reads the request and answers (or does not)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

Behaviour = Callable[["Conn"], None]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Conn:
    sock: socket.socket
    stop: threading.Event
    requests: list[Request] = field(default_factory=list)

    def read_request(self) -> Request | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        request = Request(method, path, headers, rest[:length])
        self.requests.append(request)
        return request

    def respond(
        self,
        status: int,
        body: bytes | str = b"",
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        reason: str = "X",
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}"]
        lines.append(f"Content-Length: {len(data)}")
        lines.append("Connection: close")
        lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        self.sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + data)

    def stall(self, seconds: float = 5.0) -> None:
        self.stop.wait(seconds)


class ScriptedServer:
    """Accepts connections in a thread; every request log is kept in ``requests``."""

    def __init__(self, behaviour: Behaviour, backlog: int = 16) -> None:
        self.behaviour = behaviour
        self.stop_event = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.sock.settimeout(0.05)
        self.requests: list[Request] = []
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._loop, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> ScriptedServer:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self._accept.join(timeout=2)
        for thread in self._threads:
            thread.join(timeout=2)
        self.sock.close()

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                client, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        conn = Conn(client, self.stop_event, self.requests)
        try:
            self.behaviour(conn)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()
