"""``/mcp`` in the gateway over streamable HTTP with the SDK's own client: real
``toolsafe serve``, PostgreSQL, Redis, workers and the example downstream; the keys'
namespaces scope every ref and task."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import missing
from tests.support.gateway.harness import GatewayServer, gateway_for, make_key
from tests.support.mcp.raw import MODERN, bad_lines
from tests.support.mcp.support import http_session, meta, structured, text
from tests.support.pipeline.harness import Cluster, cluster_for
from toolsafe.mcp.client import ToolsafeTasks, answer_of, get_task
from toolsafe.mcp.tasks import CreateTaskResult
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

INVOICE: dict[str, Any] = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
REF = "toolsafe/operation_ref"


@dataclass
class Setup:
    cluster: Cluster
    server: GatewayServer
    agent_a: str
    agent_b: str

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory: Path = tmp_path_factory.mktemp("mcp-http")
    # One wait at a time: /mcp calls are counted with the rest (the test below).
    env = {"TOOLSAFE_MCP_WAIT": "15", "TOOLSAFE_GATEWAY_MAX_WAITS": "1"}
    with cluster_for(pg_url, redis_url, directory, suffix="mcphttp", env=env) as cluster:
        database = cluster.env["TOOLSAFE_DATABASE_URL"]
        keys = (
            make_key(database, "mcp-a", "agent", "team-a"),
            make_key(database, "mcp-b", "agent", "team-b"),
        )
        cluster.start_worker("mcphttp", concurrency=2)
        with gateway_for(cluster.env, directory) as server:
            yield Setup(cluster, server, *keys)


def test_no_key_no_mcp(setup: Setup) -> None:
    answer = httpx.post(
        setup.url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    assert answer.status_code == 401
    assert answer.json()["code"] == "UNAUTHENTICATED"


def test_calls_and_tasks_inside_the_key_namespace(setup: Setup) -> None:
    cluster = setup.cluster
    call_ref, task_ref = (f"h/{uuid.uuid4().hex[:10]}" for _ in range(2))

    async def run() -> None:
        async with http_session(setup.url, setup.agent_a) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert names == {"create_invoice", "send_email"}
            done = await session.call_tool("create_invoice", INVOICE, meta=meta({REF: call_ref}))
            assert done.is_error is False, text(done)
            assert structured(done)["ok"] is True
            assert structured(done)["operation_ref"] == f"team-a/{call_ref}"
        # The same call again, in a new connection: the same step, no second write.
        async with http_session(setup.url, setup.agent_a) as session:
            again = await session.call_tool("create_invoice", INVOICE, meta=meta({REF: call_ref}))
            assert structured(again) == structured(done)

        async with http_session(setup.url, setup.agent_a, tasks=True) as session:
            created = await session.call_tool(
                "create_invoice", INVOICE, meta=meta({REF: task_ref}), allow_claimed=True
            )
            assert isinstance(created, CreateTaskResult)
            assert created.task_id == f"team-a/{task_ref}"
            with anyio.fail_after(20):
                while (task := await get_task(session, created.task_id)).status != "completed":
                    await anyio.sleep(0.1)
            result = answer_of(task)
            assert result is not None and result.is_error is False
            assert structured(result)["operation_ref"] == f"team-a/{task_ref}"
        async with http_session(setup.url, setup.agent_b, tasks=True) as session:
            with pytest.raises(MCPError, match="no task"):
                await get_task(session, f"team-a/{task_ref}")

    anyio.run(run)
    assert cluster.effects(f"team-a/{call_ref}") == 1
    assert cluster.effects(f"team-a/{task_ref}") == 1
    assert cluster.client.view(f"team-a/{task_ref}").state is StepState.SUCCEEDED


def _post(setup: Setup, raw: bytes, token: str, **headers: str) -> httpx.Response:
    return httpx.post(
        setup.url,
        content=raw,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "create_invoice",
            **headers,
        },
        timeout=30,
    )


def test_bad_input_over_http_is_answered_and_nothing_is_stored(setup: Setup) -> None:
    """The stdio cases, as raw POST bodies: each gets its JSON-RPC error, and nothing
    of it is stored under the key's namespace nor reaches the downstream."""
    cluster = setup.cluster
    prefix = f"hbad-{uuid.uuid4().hex[:8]}"
    before = dict(cluster.downstream.effects())
    for case, raw, code, ref in bad_lines(prefix):
        answer = _post(setup, raw, setup.agent_a)
        assert answer.status_code in (200, 400), (case, answer.status_code, answer.text)
        assert answer.json()["error"]["code"] == code, (case, answer.text)
        if ref is not None:
            with pytest.raises(StepNotFound):
                cluster.client.view(f"team-a/{ref}")
    assert dict(cluster.downstream.effects()) == before, "a malformed input reached downstream"
    # The gateway's own JSON bodies: the same reader, a problem naming the fault.
    deep = b'{"input": {"customer_id": ' + b"[" * 100 + b"]" * 100 + b"}}"
    refused = httpx.post(
        f"{setup.server.url}/v1/tools/create_invoice/calls",
        content=deep,
        headers={
            "Authorization": f"Bearer {setup.agent_a}",
            "Content-Type": "application/json",
            "Idempotency-Key": f"{prefix}/v1deep",
        },
        timeout=30,
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "INVALID_REQUEST"
    assert "deeper than 64 levels" in refused.json()["detail"]
    with pytest.raises(StepNotFound):
        cluster.client.view(f"team-a/{prefix}/v1deep")


def test_mcp_waits_count_in_the_gateways_limit(setup: Setup) -> None:
    """While a /mcp tools/call holds the one wait (TOOLSAFE_GATEWAY_MAX_WAITS=1), a /v1
    wait is refused 429 TOO_MANY_WAITS; once it is answered, the slot is free again."""
    cluster = setup.cluster
    ref = f"w/{uuid.uuid4().hex[:10]}"
    other = f"w/{uuid.uuid4().hex[:10]}"
    cluster.fault(fault="stall_before_store", operation_ref=f"team-a/{ref}", times=1, seconds=4)
    headers = {"Authorization": f"Bearer {setup.agent_a}"}
    submitted = httpx.post(
        f"{setup.server.url}/v1/tools/create_invoice/calls",
        json={"input": INVOICE},
        headers={**headers, "Idempotency-Key": other},
        timeout=30,
    )
    assert submitted.status_code in (200, 201, 202), submitted.text
    seen: dict[str, object] = {}

    async def run() -> None:
        async def hold() -> None:
            async with http_session(setup.url, setup.agent_a) as session:
                answer = await session.call_tool("create_invoice", INVOICE, meta=meta({REF: ref}))
                seen["answer"] = answer

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            with anyio.fail_after(20), httpx.Client(base_url=setup.server.url, timeout=5) as http:
                while http.get("/healthz").json()["waits"] < 1:
                    await anyio.sleep(0.05)
            refused = httpx.get(
                f"{setup.server.url}/v1/calls/{other}?wait=1", headers=headers, timeout=30
            )
            seen["refused"] = refused

    anyio.run(run)
    refused = seen["refused"]
    assert isinstance(refused, httpx.Response)
    assert refused.status_code == 429 and refused.json()["code"] == "TOO_MANY_WAITS"
    answer = seen["answer"]
    assert structured(answer)["ok"] is True  # type: ignore[arg-type]
    assert httpx.get(f"{setup.server.url}/healthz", timeout=5).json()["waits"] == 0
    assert cluster.effects(f"team-a/{ref}") == 1


def test_the_sdks_client_in_both_modes_over_http(setup: Setup) -> None:
    """The SDK's ``Client`` over ``/mcp``: ``mode="legacy"`` (the handshake: a bounded
    wait) and ``mode="auto"`` (``server/discover`` picks 2026-07-28; with the tasks
    extension ``call_tool`` follows the task to the step's result)."""
    cluster = setup.cluster
    refs = {mode: f"c/{uuid.uuid4().hex[:10]}" for mode in ("legacy", "auto")}

    async def run() -> None:
        headers = {"Authorization": f"Bearer {setup.agent_a}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(setup.url, http_client=http)
            async with Client(transport, mode="legacy") as client:
                assert client.session.protocol_version == "2025-11-25"
                legacy = await client.call_tool(
                    "create_invoice", INVOICE, meta=meta({REF: refs["legacy"]})
                )
                assert legacy.is_error is False and structured(legacy)["ok"] is True
            transport = streamable_http_client(setup.url, http_client=http)
            async with Client(transport, mode="auto", extensions=[ToolsafeTasks()]) as client:
                assert client.session.protocol_version == MODERN
                modern = await client.call_tool(
                    "create_invoice", INVOICE, meta=meta({REF: refs["auto"]})
                )
                assert modern.is_error is False and structured(modern)["ok"] is True
                evidence = structured(modern)["verification"]["evidence_ref"]
                assert f"evidence {evidence}" in text(modern)

    anyio.run(run)
    for ref in refs.values():
        assert cluster.effects(f"team-a/{ref}") == 1


NODE_TEST = Path(__file__).parent / "node"


def _node_or_fail() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing("node", "node and npm are needed for the MCP TypeScript SDK's test")
    return node, npm


def test_the_typescript_sdks_client(setup: Setup) -> None:
    """The official MCP TypeScript SDK's ``Client`` over ``/mcp`` (the version pinned in
    ``node/package.json``, installed by npm here): tools, a call and its replay, a
    refused input; one effect for the call, none for the refusal."""
    node, npm = _node_or_fail()
    subprocess.run(
        [npm, "install", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=NODE_TEST,
        check=True,
        timeout=240,
    )
    prefix = f"ts-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "TOOLSAFE_MCP_URL": setup.url,
        "TOOLSAFE_KEY": setup.agent_a,
        "TOOLSAFE_REF_PREFIX": prefix,
    }
    ran = subprocess.run(
        [node, "--test", "mcp_client.test.mjs"],
        cwd=NODE_TEST,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "# pass 1" in ran.stdout and "# fail 0" in ran.stdout, ran.stdout[-2000:]
    assert setup.cluster.effects(f"team-a/{prefix}/ts-call") == 1
    assert setup.cluster.effects(f"team-a/{prefix}/ts-refused") == 0
