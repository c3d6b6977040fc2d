"""A flood of bad tokens against a gateway, in a process of its own (so its clients'
CPU and GIL are not the measured agent's): ``python tests/support/gateway/flood.py URL
PLAN`` where PLAN is JSON: ``tokens`` (sent in turn), ``phases``, ``per_phase``,
``clients`` (threads, each with one keep-alive connection, HTTP spoken by hand),
``rate`` (requests per second in all, paced) and ``pause`` (quiet seconds after each
phase).

It waits for a line on stdin (go), then prints one JSON line per phase: its start and end
on the system's monotonic clock (the same clock in every process) and the count of each
status answered (``"error"`` for a request that got no answer)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlsplit


class Connection:
    """One keep-alive HTTP/1.1 connection, spoken by hand: the flood's own CPU (the
    machine's, shared with the gateway and the agent) stays far below an HTTP client's."""

    def __init__(self, url: str) -> None:
        parsed = urlsplit(url)
        self.host = f"{parsed.hostname}:{parsed.port}"
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=30)
        self.buffer = b""

    def get(self, token: str) -> tuple[int, bytes]:
        """The status and head of ``GET /v1/tools`` with ``token``."""
        request = (
            f"GET /v1/tools HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buffer) < length:
            self.buffer += self._recv()
        self.buffer = self.buffer[length:]
        return int(head.split(b" ", 2)[1]), head.lower()

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the gateway closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def _send(connection: Connection, token: str, seen: Counter[str]) -> None:
    try:
        status, head = connection.get(token)
    except (OSError, ValueError):
        seen["error"] += 1
        return
    seen[str(status)] += 1
    if status == 429 and b"\r\nretry-after:" not in head:
        seen["429 without Retry-After"] += 1


def main() -> int:
    url, plan = sys.argv[1], json.loads(sys.argv[2])
    tokens: list[str] = plan["tokens"]
    clients: int = plan["clients"]
    phases: int = plan["phases"]
    per_client = plan["per_phase"] // clients
    interval = clients / plan["rate"]  # each client's pace
    counts = [Counter[str]() for _ in range(phases)]
    lock = threading.Lock()
    starts: list[float] = [0.0] * phases
    ready = threading.Barrier(clients + 1)  # the phase may begin
    finished = threading.Barrier(clients + 1)  # every client is done with it

    def client(offset: int) -> None:
        # One keep-alive connection per client for the whole flood.
        http = Connection(url)
        try:
            for phase in range(phases):
                ready.wait()
                seen: Counter[str] = Counter()
                # Offset within the interval: the flood arrives evenly, not in bursts.
                begun = starts[phase] + offset * interval / clients
                for index in range(per_client):
                    delay = begun + index * interval - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    _send(http, tokens[(offset + index) % len(tokens)], seen)
                with lock:
                    counts[phase].update(seen)
                finished.wait()
        finally:
            http.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    sys.stdin.readline()
    for phase in range(phases):
        starts[phase] = time.monotonic()
        ready.wait()
        finished.wait()
        end = time.monotonic()
        print(json.dumps({"start": starts[phase], "end": end, "statuses": counts[phase]}))
        sys.stdout.flush()
        time.sleep(plan["pause"])
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
