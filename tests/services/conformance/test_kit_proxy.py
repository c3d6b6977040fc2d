"""The conformance kit's fault proxy relays and injects over real sockets; a slow answer
is held only until the adapter gives up, and the block that held it ends knowing what the
service did."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.conformance import check_adapter, load_adapter
from toolsafe.conformance.proxy import Action, FaultProxy

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}


def _chunked(conn: Conn) -> None:
    if conn.read_request() is None:
        return
    body = b'{"id": "x_1"}'
    head = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
    head += b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    conn.sock.sendall(head + b"5\r\n" + body[:5] + b"\r\n8\r\n" + body[5:] + b"\r\n0\r\n\r\n")


def test_the_proxy_relays_and_injects_over_real_sockets() -> None:
    with (
        ScriptedServer(_chunked) as server,
        FaultProxy(server.url) as proxy,
        httpx.Client(base_url=proxy.url, timeout=2.0) as client,
    ):
        with proxy.acting(Action()) as seen:
            relayed = client.post("/things", json={"a": 1}, headers={"X-Key": "k1"})
        assert (relayed.status_code, relayed.json()) == (201, {"id": "x_1"})
        assert seen[0].forwarded and seen[0].upstream_status == 201
        assert server.requests[-1].headers["x-key"] == "k1"
        assert json.loads(server.requests[-1].body) == {"a": 1}
        with proxy.acting(Action("status_after", status=502)) as seen:
            gateway = client.post("/things", json={})
        assert gateway.status_code == 502 and seen[0].upstream_status == 201
        with proxy.acting(Action("answer", status=429, headers=(("Retry-After", "7"),))):
            limited = client.post("/things", json={})
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "7")
        before = len(server.requests)
        with proxy.acting(Action("drop_before")), httpx.Client(timeout=2.0) as fresh:
            try:
                fresh.post(proxy.url + "/things", json={})
                raise AssertionError("the proxy answered a dropped request")
            except httpx.RemoteProtocolError:
                pass
        assert len(server.requests) == before  # nothing reached the service


def test_a_held_answer_is_judged_by_what_the_service_did_after_the_client_gave_up() -> None:
    answer_now = threading.Event()

    def late(conn: Conn) -> None:
        if conn.read_request() is not None and answer_now.wait(30):
            conn.respond(201, b'{"id": "x_2"}')

    with (
        ScriptedServer(late) as server,
        FaultProxy(server.url) as proxy,
        httpx.Client(base_url=proxy.url, timeout=httpx.Timeout(10.0, read=0.2)) as client,
    ):
        with proxy.acting(Action("stall_after", seconds=60)) as seen:
            with pytest.raises(httpx.ReadTimeout):
                client.post("/things", json={})
            answer_now.set()  # the service acts only once the client has given up
        # The block ended once the service had answered the proxy, not after the hold.
        assert len(seen) == 1 and seen[0].action == "stall_after"
        assert seen[0].forwarded and seen[0].upstream_status == 201


def test_the_slow_answers_last_until_the_adapter_gives_up_not_the_run_timeout() -> None:
    timeout = 30.0
    with DownstreamService() as service:
        loaded = load_adapter("toolsafe.adapters.examples:create_invoice")
        started = time.monotonic()
        report = check_adapter(loaded, INVOICE, base_url=service.url, timeout=timeout)
        elapsed = time.monotonic() - started
    assert report.passed, report.text()
    verdicts = {check.scenario: check.verdict for check in report.checks}
    for scenario in (
        "request delivered, answer slower than the read timeout",
        "verify after: request delivered, answer slower than the read timeout",
        "lookup: answer slower than the read timeout",
    ):
        assert verdicts[scenario] == "pass", scenario
    # Two answers held while the adapter waited for a 30 s read timeout would take a
    # minute: each was given up on after the slow-answer scenarios' own short timeout.
    assert elapsed < timeout
