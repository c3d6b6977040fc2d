"""Transport rows of DESIGN §7 against real sockets on 127.0.0.1: what was provably not
sent waits and retries, client bugs escalate, what may have been sent is unknown."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from tests.support.adapters.probe_adapters import (
    FAST,
    ProbeRead,
    ProbeWrite,
    ProbeWriteNoLookup,
    settings,
)
from tests.support.machine import Machine
from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.guard import call_adapter
from toolsafe.adapters.http import transport_failure
from toolsafe.adapters.protocol import CallContext
from toolsafe.harness import free_port  # a port nothing listens on

REF = "run_81/step_4"
INPUT = {"name": "n", "amount": 3}


def _error(result: object) -> ToolError:
    assert isinstance(result, ToolError), result
    return result


def assert_retry_later(result: object, reason: str) -> ToolError:
    envelope = _error(result)
    assert envelope.code == "DEPENDENCY_UNAVAILABLE"
    assert envelope.commit_state == "not_committed"
    assert envelope.retry.directive == "after_delay"
    assert envelope.next_action == "wait_and_retry"
    assert envelope.retry.not_before is not None
    assert envelope.retry.not_before.tzinfo is not None
    assert envelope.retry.not_before >= datetime.now(UTC)
    assert envelope.safe_details["reason"] == reason
    return envelope


def assert_unknown(result: object, reason: str, action: str = "verify_operation") -> None:
    envelope = _error(result)
    assert envelope.code == "OUTCOME_UNKNOWN"
    assert envelope.commit_state == "unknown"
    assert envelope.retry.directive == "never"
    assert envelope.retry.max_attempts_remaining == 0
    assert envelope.next_action == action
    assert envelope.safe_details["reason"] == reason


def assert_client_bug(result: object, reason: str) -> None:
    envelope = _error(result)
    assert envelope.code == "CLIENT_REQUEST_INVALID"
    assert (envelope.category, envelope.commit_state) == ("internal", "not_committed")
    assert (envelope.retry.directive, envelope.next_action) == ("never", "escalate")
    assert envelope.safe_details["reason"] == reason


# --- nothing sent ---------------------------------------------------------------------


def test_unresolvable_host_is_not_committed_and_waits() -> None:
    adapter = ProbeWrite(settings("http://toolsafe-no-such-host.invalid"))
    assert_retry_later(call_adapter(adapter, INPUT, REF), "connect_error")


def test_refused_port_is_not_committed_and_waits() -> None:
    adapter = ProbeWrite(settings(f"http://127.0.0.1:{free_port()}"))
    assert_retry_later(call_adapter(adapter, INPUT, REF), "connect_error")


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A listener whose accept queue is full: the kernel drops further SYNs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.05)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


def test_connect_timeout_is_not_committed(full_backlog: int) -> None:
    adapter = ProbeWrite(settings(f"http://127.0.0.1:{full_backlog}"))
    assert_retry_later(call_adapter(adapter, INPUT, REF), "connect_timeout")


def test_pool_timeout_is_not_committed() -> None:
    release = threading.Event()

    def slow(conn: Conn) -> None:
        conn.read_request()
        release.wait(3)
        conn.respond(201, '{"id": "t1"}')

    with ScriptedServer(slow) as server:
        adapter = ProbeWrite(settings(server.url, max_connections=1, read_timeout=3))
        first: list[object] = []
        holder = threading.Thread(
            target=lambda: first.append(call_adapter(adapter, INPUT, "run_1/step_1"))
        )
        holder.start()
        deadline = time.monotonic() + 2
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert_retry_later(call_adapter(adapter, INPUT, REF), "pool_timeout")
        release.set()
        holder.join(timeout=5)
    assert len(server.requests) == 1  # the second request never left the pool


def test_proxy_refusing_the_tunnel_is_not_committed() -> None:
    def proxy(conn: Conn) -> None:
        conn.sock.recv(4096)
        conn.sock.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    with ScriptedServer(proxy) as server:
        adapter = ProbeWrite(settings("https://api.example.invalid", proxy=server.url))
        assert_retry_later(call_adapter(adapter, INPUT, REF), "proxy_error")


# --- client bugs ----------------------------------------------------------------------


def test_invalid_url_is_a_client_bug() -> None:
    adapter = ProbeWrite(settings("http://[::1"))
    assert_client_bug(call_adapter(adapter, INPUT, REF), "invalid_url")


def test_unsupported_protocol_is_a_client_bug() -> None:
    adapter = ProbeWrite(settings("ftp://127.0.0.1:21"))
    assert_client_bug(call_adapter(adapter, INPUT, REF), "unsupported_protocol")


def test_illegal_header_is_a_local_protocol_error_and_nothing_is_sent() -> None:
    def answer(conn: Conn) -> None:
        if conn.read_request():
            conn.respond(201, '{"id": "t1"}')

    with ScriptedServer(answer) as server:
        adapter = ProbeWrite(settings(server.url))
        context = CallContext(attempt=1, approval_ref="apr_1\r\nX-Injected: 1")
        assert_client_bug(call_adapter(adapter, INPUT, REF, context), "local_protocol_error")
    assert server.requests == []


# --- maybe sent -----------------------------------------------------------------------


def _reads_then_closes(conn: Conn) -> None:
    conn.read_request()


def _reads_then_stalls(conn: Conn) -> None:
    conn.read_request()
    conn.stall(3)


def test_read_timeout_after_sending_is_unknown_and_verified(machine: Machine) -> None:
    with ScriptedServer(_reads_then_stalls) as server:
        started = time.monotonic()
        result = call_adapter(ProbeWrite(settings(server.url)), INPUT, REF)
        # Cut by the read timeout (plus a second), not by the server's 3 s stall.
        bound = FAST["read_timeout"] + 1.0
        took = time.monotonic() - started
        assert took < machine.seconds(bound), (took, machine.explain(bound))
        assert_unknown(result, "read_timeout")
        assert server.requests[0].headers["idempotency-key"] == REF


def test_unknown_without_lookup_escalates() -> None:
    with ScriptedServer(_reads_then_stalls) as server:
        result = call_adapter(ProbeWriteNoLookup(settings(server.url)), INPUT, REF)
    assert_unknown(result, "read_timeout", action="escalate")


def test_connection_closed_after_the_body_is_unknown() -> None:
    with ScriptedServer(_reads_then_closes) as server:
        result = call_adapter(ProbeWrite(settings(server.url)), INPUT, REF)
    assert_unknown(result, "remote_protocol_error")


def test_connection_reset_after_the_body_is_unknown() -> None:
    def reset(conn: Conn) -> None:
        conn.read_request()
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with ScriptedServer(reset) as server:
        result = call_adapter(ProbeWrite(settings(server.url)), INPUT, REF)
    assert_unknown(result, "read_error")


def test_write_timeout_is_unknown() -> None:
    class Big(ProbeWrite):
        def request_json(self, data: object) -> dict[str, str]:  # type: ignore[override]
            return {"name": "x" * (48 * 1024 * 1024)}

    with ScriptedServer(lambda conn: conn.stall(3)) as server:
        result = call_adapter(Big(settings(server.url)), INPUT, REF)
    assert_unknown(result, "write_timeout")


def test_read_tool_retries_every_dependency_failure() -> None:
    with ScriptedServer(_reads_then_stalls) as server:
        assert_retry_later(
            call_adapter(ProbeRead(settings(server.url)), INPUT, REF), "read_timeout"
        )
    with ScriptedServer(_reads_then_closes) as server:
        result = call_adapter(ProbeRead(settings(server.url)), INPUT, REF)
        assert_retry_later(result, "remote_protocol_error")
        assert server.requests[0].method == "GET"
        assert "name=n" in server.requests[0].path


@pytest.mark.parametrize(
    ("error", "group"),
    [
        (httpx.ConnectError("x"), "not_sent"),
        (httpx.ConnectTimeout("x"), "not_sent"),
        (httpx.PoolTimeout("x"), "not_sent"),
        (httpx.ProxyError("x"), "not_sent"),
        (httpx.InvalidURL("x"), "client_bug"),
        (httpx.UnsupportedProtocol("x"), "client_bug"),
        (httpx.LocalProtocolError("x"), "client_bug"),
        (httpx.WriteTimeout("x"), "maybe_sent"),
        (httpx.WriteError("x"), "maybe_sent"),
        (httpx.ReadTimeout("x"), "maybe_sent"),
        (httpx.ReadError("x"), "maybe_sent"),
        (httpx.RemoteProtocolError("x"), "maybe_sent"),
        (httpx.DecodingError("x"), "maybe_sent"),
        (RuntimeError("x"), "maybe_sent"),
    ],
)
def test_transport_groups(error: BaseException, group: str) -> None:
    # WriteError has no live test: httpcore answers a failed write by reading the
    # response, so a reset mid-body surfaces as RemoteProtocolError (tested above).
    assert transport_failure(error) == group
