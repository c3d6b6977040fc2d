"""``/mcp`` in the gateway over streamable HTTP with the SDK's own client: real
``toolsafe serve``, PostgreSQL, Redis, workers and the example downstream; the keys'
namespaces scope every ref and task."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.harness import GatewayServer, gateway_for, make_key
from tests.mcp.support import http_session, meta, structured, text
from tests.pipeline.harness import Cluster, cluster_for
from toolsafe.mcp.client import answer_of, get_task
from toolsafe.mcp.tasks import CreateTaskResult
from toolsafe.recovery.states import StepState

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
    with cluster_for(
        pg_url, redis_url, directory, suffix="mcphttp", env={"TOOLSAFE_MCP_WAIT": "15"}
    ) as cluster:
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
