"""Bytes on the wire, without an SDK in between: a real ``toolsafe mcp`` process fed
raw lines on stdin (what a broken or hostile host might send), and the raw body of a
POST to ``/mcp``. The messages every bad-input test sends are built here, once."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from tests.support.gateway.harness import ROOT

MODERN: Final = "2026-07-28"
TASKS: Final = "io.modelcontextprotocol/tasks"
INVOICE: Final[dict[str, Any]] = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}


def envelope(*, tasks: bool = False, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A 2026-07-28 request's ``_meta``: the protocol version and the capabilities on
    every request, no ``initialize``."""
    extensions: dict[str, Any] = {TASKS: {}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        **(extra or {}),
    }


def request(request_id: int, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)}


def call(request_id: int, ref: str, arguments: Any, *, tasks: bool = False) -> dict[str, Any]:
    """A stateless ``tools/call`` of ``create_invoice`` under ``ref``."""
    params = {"name": "create_invoice", "arguments": arguments}
    params["_meta"] = envelope(tasks=tasks, extra={"toolsafe/operation_ref": ref})
    return request(request_id, "tools/call", params)


def line(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def bad_lines(prefix: str) -> list[tuple[str, bytes, int, str | None]]:
    """(case, the raw line, the JSON-RPC code it must get, the ref it names) for every
    malformed input; a ref named must never be stored nor reach the downstream."""
    good = line(call(1, f"{prefix}/good", INVOICE))
    utf8 = good.replace(b"cus_1", b"cus_\xff\xfe1").replace(b"/good", b"/utf8")
    surrogate = good.replace(b"cus_1", b"cus_\\ud800").replace(b"/good", b"/surrogate")
    deep = good.replace(b'"cus_1"', nested(10_000).encode()).replace(b"/good", b"/deep")
    # Deeper than toolsafe's limit (64), well inside what a JSON parser takes.
    deep_100 = good.replace(b'"cus_1"', nested(100).encode()).replace(b"/good", b"/deep100")
    batch = b"[" + line(call(2, f"{prefix}/batch", INVOICE)) + b"]"
    return [
        ("not JSON", b"create_invoice please", -32700, None),
        ("truncated JSON", good.replace(b"/good", b"/cut")[:-3], -32700, f"{prefix}/cut"),
        ("invalid UTF-8", utf8, -32700, f"{prefix}/utf8"),
        ("a lone surrogate", surrogate, -32700, f"{prefix}/surrogate"),
        ("nested 10,000 deep", deep, -32700, f"{prefix}/deep"),
        ("nested 100 deep", deep_100, -32700, f"{prefix}/deep100"),
        ("a JSON array (batch)", batch, -32600, f"{prefix}/batch"),
        ("a number", b"42", -32600, None),
        ("a string", b'"tools/call"', -32600, None),
        ("not a JSON-RPC message", b'{"jsonrpc":"2.0","id":7}', -32600, None),
        ("null arguments", line(call(8, f"{prefix}/null", None)), -32602, f"{prefix}/null"),
    ]


class RawStdio:
    """``toolsafe mcp`` as a subprocess, spoken to in bytes."""

    def __init__(self, env: Mapping[str, str], log: Path, *args: str) -> None:
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolsafe", "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **env},
            cwd=str(ROOT),
        )
        self._buffer = b""

    def send(self, raw: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(raw + b"\n")
        self.process.stdin.flush()

    def answer(self, timeout: float) -> dict[str, Any]:
        """The next line the server writes, parsed; fails (never hangs) after
        ``timeout`` seconds without one."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no answer within {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the server closed stdout (exit {self.process.poll()})")
            self._buffer += chunk
        found, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(found)
        return answer

    def close(self, timeout: float = 20) -> int:
        """Close stdin (the host is done) and wait for the exit code."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self._log.close()
