"""After a hard broker restart the sweeper re-sends the hints the broker lost, and only
those: a run without faults re-sends nothing, a restart re-sends each lost hint once
(bounded per sweep), and every step still reaches the downstream exactly once.

The hints wait in a Redis server of the test's own (no worker consumes them while it is
killed), so the hints the broker lost are exactly the ones it held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness.redis_server import RedisServer
from toolsafe.recovery.states import StepState
from toolsafe.tasks import sweeper

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_l", "amount_cents": 300, "currency": "EUR"}
STEPS = 60
BATCH = 25


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis server of the test's own: it is restarted, never the shared one."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster(pg_url: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[Cluster]:
    # Stale hints are re-sent only after 10 minutes here, so every hint that comes back
    # in this test comes back because the broker lost it.
    env = {"TOOLSAFE_SWEEP_BATCH": str(BATCH), "TOOLSAFE_REPUBLISH_AFTER": "600"}
    with cluster_for(pg_url, redis_server.url(1), tmp_path, suffix="lost", env=env) as running:
        yield running


def _sweep(cluster: Cluster) -> dict[str, int]:
    publisher = cluster.client.app.publisher
    return sweeper.sweep(cluster.client.runtime, publisher, publisher.backlog, publisher.watch)


def test_a_hard_restart_resends_the_lost_hints_once_and_a_quiet_run_none(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    publisher = cluster.client.app.publisher
    refs = [new_ref("lost") for _ in range(STEPS)]
    for ref in refs:
        cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    assert publisher.backlog() == STEPS

    # No fault: sweeps re-send nothing (the broker still holds every hint).
    for _ in range(3):
        _sweep(cluster)
    assert publisher.backlog() == STEPS

    redis_server.restart()
    lost = STEPS - (publisher.backlog() or 0)
    assert lost == STEPS  # nothing persisted: every waiting hint is gone

    # A batch per sweep until all are back; more sweeps add nothing.
    for _ in range(STEPS // BATCH + 3):
        _sweep(cluster)
    resent = publisher.backlog()
    assert resent is not None and lost <= resent <= 1.1 * lost

    cluster.start_worker("lost", concurrency=2, beat=True)
    store = cluster.client.runtime.store
    cluster.wait_for(
        lambda: all(store.get(ref).state is StepState.SUCCEEDED for ref in refs),
        timeout=120,
        what="every step to succeed",
    )
    assert {ref: cluster.effects(ref) for ref in refs} == dict.fromkeys(refs, 1)
