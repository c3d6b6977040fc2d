"""A hard restart of the broker (redis-server SIGKILLed and started again on the same
port: queues, unacked and ETA messages gone) leaves every worker's main process alive,
consuming again, and every step done once.

Without toolsafe's Redis transport guard (``toolsafe.broker.redis``) a worker that held
ETA messages at the moment of the restart died with ``AttributeError: 'NoneType' object
has no attribute 'hostname'``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness import Process
from toolsafe.harness.redis_server import RedisServer
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_r", "amount_cents": 700, "currency": "EUR"}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis server of the test's own: it is restarted, never the shared one."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster(pg_url: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_server.url(1), tmp_path, suffix="redis_restart") as running:
        yield running


def _reconnected(worker: Process, losses: int) -> bool:
    text = worker.text()
    return text.count("Connection to broker lost") >= losses and (
        text.count("Connected to ") > losses
    )


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_worker_survives_a_hard_redis_restart_while_it_holds_eta_messages(
    cluster: Cluster, redis_server: RedisServer, pool: str
) -> None:
    worker = cluster.start_worker(f"restart-{pool}", pool=pool, concurrency=2)
    # Rate-limited steps wait as ETA messages the worker holds, unacknowledged, in memory:
    # the condition that killed workers on a restart.
    waiting = [new_ref("restart/eta") for _ in range(3)]
    for ref in waiting:
        cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=4)
        cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    cluster.wait_for(
        lambda: all(store.get(ref).state is S.WAITING_RETRY for ref in waiting),
        what="steps waiting to retry",
    )
    redis_server.restart()
    cluster.wait_for(lambda: _reconnected(worker, 1), timeout=30, what="the worker to reconnect")
    assert worker.alive(), worker.text()[-4000:]
    assert "Unrecoverable error" not in worker.text()
    # It consumes again: a new step, and the ones whose ETA messages the restart wiped
    # (re-published by the sweeper from the database).
    fresh = new_ref("restart/fresh")
    cluster.client.submit("create_invoice", INVOICE, operation_ref=fresh)
    for ref in [fresh, *waiting]:
        view = cluster.client.wait(ref, timeout=40)
        assert view.state is S.SUCCEEDED, cluster.logs()
        assert cluster.effects(ref) == 1
    assert worker.alive()
