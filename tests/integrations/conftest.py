"""One cluster for every integration test: real Redis, real PostgreSQL, two real celery
worker processes and the example downstream, which counts each operation_ref's effects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pipeline.harness import Cluster, cluster_for
from toolsafe.tasks.app import create_app
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.client import Client


@pytest.fixture(scope="package")
def cluster(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("integrations")
    with cluster_for(pg_url, redis_url, directory, suffix="integrations") as running:
        running.start_worker("integrations", concurrency=2)
        yield running


class Processes:
    """The clients of the agent "processes" the tests play (``"first"``, ``"second"``,
    …): each its own database engine, broker connection and change feed, as a separate
    process would have, made once and shared by the tests of the folder."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._made: dict[str, Client] = {}

    def client(self, name: str) -> Client:
        if name not in self._made:
            self._made[name] = Client(create_app(self.cluster.settings))
        return self._made[name]

    def aio(self, name: str) -> AsyncClient:
        return AsyncClient(self.client(name))

    def close(self) -> None:
        for client in self._made.values():
            client.close()
        self._made.clear()


@pytest.fixture(scope="package")
def processes(cluster: Cluster) -> Iterator[Processes]:
    made = Processes(cluster)
    yield made
    made.close()
