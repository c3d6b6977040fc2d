"""One cluster for every integration test, per door: real Redis, real PostgreSQL, two
real celery worker processes and the example downstream, which counts each
operation_ref's effects. Every test runs twice: once with the in-process clients, once
over a real ``toolsafe serve`` through the gateway clients holding an agent key only
(an approver's process holds an operator key, as a person who approves would)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.gateway.harness import gateway_for, make_key
from tests.support.pipeline.harness import Cluster, cluster_for
from toolsafe.gateway.client import AsyncGatewayClient, GatewayClient
from toolsafe.tasks.app import create_app
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.calls import AsyncCalls, Calls
from toolsafe.tasks.client import Client

IN_PROCESS = "in_process"
GATEWAY = "gateway"
APPROVER_KEY = "approver"
NAMESPACE = "agent-service"


@dataclass(frozen=True)
class Door:
    """How the agent processes reach toolsafe: in process, or a gateway's URL and keys."""

    name: str
    url: str = ""
    agent_key: str = ""
    operator_key: str = ""


@pytest.fixture(scope="package", params=[IN_PROCESS, GATEWAY])
def door_cluster(
    request: pytest.FixtureRequest,
    pg_url: str,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, Door]]:
    name: str = request.param
    directory = tmp_path_factory.mktemp(f"integrations-{name}")
    with cluster_for(pg_url, redis_url, directory, suffix=f"integrations_{name}") as running:
        running.start_worker("integrations", concurrency=2)
        if name == IN_PROCESS:
            yield running, Door(name)
            return
        database = running.env["TOOLSAFE_DATABASE_URL"]
        # An agent key always has a namespace (its name); the approver's operator key
        # works inside the same one.
        agent = make_key(database, NAMESPACE, "agent")
        operator = make_key(database, APPROVER_KEY, "operator", NAMESPACE)
        with gateway_for(running.env, directory) as server:
            yield running, Door(name, server.url, agent, operator)


@pytest.fixture(scope="package")
def cluster(door_cluster: tuple[Cluster, Door]) -> Cluster:
    return door_cluster[0]


class Processes:
    """The clients of the agent "processes" the tests play (``"first"``, ``"second"``,
    …): each its own connections, as a separate process would have, made once and
    shared by the tests of the folder. Over the gateway an agent process holds the
    agent key; ``approver=True`` gives the process of someone who approves."""

    def __init__(self, cluster: Cluster, door: Door) -> None:
        self.cluster = cluster
        self.door = door
        self._made: dict[str, Client] = {}
        self._remote: list[GatewayClient] = []

    @property
    def over_gateway(self) -> bool:
        return self.door.name == GATEWAY

    def _key(self, approver: bool) -> str:
        return self.door.operator_key if approver else self.door.agent_key

    def client(self, name: str, *, approver: bool = False) -> Calls:
        if self.over_gateway:
            remote = GatewayClient(self.door.url, self._key(approver), timeout=30)
            self._remote.append(remote)
            return remote
        return self.local(name)

    def aio(self, name: str, *, approver: bool = False) -> AsyncCalls:
        if self.over_gateway:
            # Each asyncio.run is a loop of its own: no connection is kept between them.
            limits = httpx.Limits(max_keepalive_connections=0)
            return AsyncGatewayClient(self.door.url, self._key(approver), timeout=30, limits=limits)
        local = self.client(name)
        assert isinstance(local, Client)
        return AsyncClient(local)

    def local(self, name: str) -> Client:
        """An in-process client, whatever the door (the docs' examples take one)."""
        if name not in self._made:
            self._made[name] = Client(create_app(self.cluster.settings))
        return self._made[name]

    def scoped(self, operation_ref: str) -> str:
        """The ref the step has: over the gateway, inside the key's namespace."""
        return f"{NAMESPACE}/{operation_ref}" if self.over_gateway else operation_ref

    def recorded(self, approver: str) -> str:
        """How the store records an approver the tests name: over the gateway, with the
        acting key."""
        return f"{approver} (key:{APPROVER_KEY})" if self.over_gateway else approver

    def close(self) -> None:
        for client in self._made.values():
            client.close()
        for remote in self._remote:
            remote.close()
        self._made.clear()
        self._remote.clear()


@pytest.fixture(scope="package")
def processes(door_cluster: tuple[Cluster, Door]) -> Iterator[Processes]:
    made = Processes(*door_cluster)
    yield made
    made.close()
