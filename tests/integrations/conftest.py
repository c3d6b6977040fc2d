"""One cluster for every integration test: real Redis, real PostgreSQL, two real celery
worker processes and the example downstream, which counts each operation_ref's effects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.harness import Cluster, cluster_for


@pytest.fixture(scope="package")
def cluster(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("integrations")
    with cluster_for(pg_url, redis_url, directory, suffix="integrations") as running:
        running.start_worker("integrations", concurrency=2)
        yield running
