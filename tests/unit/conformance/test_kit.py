"""The kit's parts in-process: the proxy relays and injects over real sockets, reads and
adapters it cannot wrap get the rows that apply to them, the report's two forms agree,
and the room needs neither a broker nor a database."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from toolsafe import read_tool
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.conformance import check_adapter
from toolsafe.conformance.proxy import Action, FaultProxy

ROOT = Path(__file__).resolve().parents[3]


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


def test_a_read_tool_gets_the_read_expectations_and_passes() -> None:
    @read_tool(timeout=0.5)
    def balance(account: str) -> dict[str, int]:
        """An account's balance."""
        return {"cents": 100}

    report = check_adapter(balance, {"account": "a"})
    assert report.passed, report.text()
    rows = {check.scenario: check for check in report.checks}
    assert "not unknown" in rows["ConnectionResetError raised after the call"].expected
    assert not any(name.startswith("lookup") for name in rows)


class Anything(BaseModel):
    name: str


class HandWritten(Adapter[Anything]):
    tool: ClassVar[str] = "hand_written"
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = Anything

    def execute(
        self, data: Anything, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        return ToolSuccess[Any](
            operation_ref=operation_ref,
            result={},
            verification=Verification(checked_at="2026-01-01T00:00:00Z", evidence_ref="e_1"),
        )


def test_an_adapter_the_kit_cannot_wrap_is_told_so() -> None:
    report = check_adapter(HandWritten(), {"name": "n"})
    verdicts = {check.scenario: check.verdict for check in report.checks}
    assert verdicts == {
        "the sample input, no fault": "pass",
        "fault injection": "skip",
        "lookup by operation_ref": "warn",
    }
    assert report.passed
    text = report.text()
    assert "hand_written (adapter): PASSED - 1 passed, 0 failed, 1 warnings, 1 skipped" in text
    data = report.to_json()
    assert data["passed"] is True and len(data["checks"]) == 3  # type: ignore[arg-type]


def test_the_kit_needs_no_broker_or_database() -> None:
    forbidden = ("celery", "kombu", "sqlalchemy", "toolsafe.tasks", "toolsafe.recovery")
    for path in sorted((ROOT / "toolsafe" / "conformance").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
