"""Every malformed input a host can send ``toolsafe mcp`` on stdio is answered as
JSON-RPC says (``-32700``, ``-32600``, ``-32602``), promptly, and nothing of it is stored
or sent: a real server process fed raw bytes, on SQLite with a real worker and the
example downstream (naive: any write would show as an effect)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.mcp.raw import INVOICE, RawStdio, bad_lines, call, envelope, line, request
from tests.support.pipeline.harness import Cluster, cluster_for
from toolsafe.mcp.wire import MAX_LINE_BYTES
from toolsafe.recovery.store import StepNotFound

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ANSWER_WITHIN = 20.0  # seconds; a server that does not answer fails here, never hangs


@dataclass
class Setup:
    cluster: Cluster
    directory: Path


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("mcp-bad")
    with cluster_for(pg_url, redis_url, directory, suffix="mcpbad", sqlite=True) as cluster:
        cluster.start_worker("mcpbad", concurrency=1)
        yield Setup(cluster, directory)


def _stored(cluster: Cluster, ref: str) -> bool:
    try:
        cluster.client.runtime.store.get(ref)
    except StepNotFound:
        return False
    return True


def test_every_bad_line_is_answered_and_nothing_is_stored_or_sent(setup: Setup) -> None:
    cluster = setup.cluster
    prefix = f"bad-{uuid.uuid4().hex[:8]}"
    before = dict(cluster.downstream.effects())
    server = RawStdio(cluster.env, setup.directory / "mcp.log", "--wait", "10")
    try:
        for case, raw, code, ref in bad_lines(prefix):
            server.send(raw)
            answer = server.answer(ANSWER_WITHIN)
            assert answer.get("error", {}).get("code") == code, (case, answer)
            assert answer["error"]["message"], case
            if ref is not None:
                assert not _stored(cluster, ref), f"{case}: {ref} was stored"
        # The messages name what is wrong, in one line.
        server.send(b"\xff\xfe{}")
        assert "not valid UTF-8" in server.answer(ANSWER_WITHIN)["error"]["message"]
        server.send(b"[" * 10_000)
        assert "deeper than 64" in server.answer(ANSWER_WITHIN)["error"]["message"]
        # A line over 4 MiB is refused and skipped, never held whole.
        server.send(b'{"jsonrpc":"2.0","id":10,"method":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}')
        assert server.answer(ANSWER_WITHIN)["error"]["code"] == -32600
        server.send(b'{"jsonrpc":"2.0","id":9}')
        assert server.answer(ANSWER_WITHIN)["id"] == 9  # the id of a malformed request kept

        # The server still serves, statelessly (2026-07-28: no initialize), and a good
        # call goes through to the downstream once.
        server.send(line(request(30, "tools/list", {"_meta": envelope()})))
        listed = server.answer(ANSWER_WITHIN)
        assert {tool["name"] for tool in listed["result"]["tools"]} == {
            "create_invoice",
            "send_email",
        }
        server.send(line(call(31, f"{prefix}/good", INVOICE)))
        done = server.answer(ANSWER_WITHIN)["result"]
        for attempt in range(32, 60):
            if "in_progress" not in done["structuredContent"]:
                break
            server.send(line(call(attempt, f"{prefix}/good", INVOICE)))
            done = server.answer(ANSWER_WITHIN)["result"]
        assert done["isError"] is False and done["structuredContent"]["ok"] is True
        assert server.close() == 0
    finally:
        if server.process.poll() is None:
            server.close()
    after = dict(cluster.downstream.effects())
    assert after.pop(f"{prefix}/good") == 1
    assert after == before, "a malformed input reached the downstream"


def test_a_call_against_a_database_without_the_schema_says_to_migrate(tmp_path: Path) -> None:
    """Never the driver's raw "no such table": one JSON-RPC error naming the fix."""
    broker = tmp_path / "broker"
    for folder in ("queue", "control", "processed"):
        (broker / folder).mkdir(parents=True)
    env = {
        "TOOLSAFE_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}",
        "TOOLSAFE_BROKER_URL": f"filesystem://{broker}",
        "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
    }
    server = RawStdio(env, tmp_path / "mcp.log", "--wait", "1")
    try:
        server.send(line(call(1, "schema/none", INVOICE)))
        error = server.answer(ANSWER_WITHIN)["error"]
        assert error["code"] == -32603, error
        assert "run `toolsafe migrate` first" in error["message"]
        assert "no such table" not in error["message"] and error["data"]["code"] == "SCHEMA_MISSING"
        assert server.close() == 0
    finally:
        if server.process.poll() is None:
            server.close()
