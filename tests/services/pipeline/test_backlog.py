"""The sweeper defers re-publishing while hints already wait in the broker.

Without the guard, a queue that drains slower than TOOLSAFE_REPUBLISH_AFTER got every
queued step re-published on every sweep (found by the long chaos run).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.machine import Machine
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness import flush_broker
from toolsafe.tasks import sweeper
from toolsafe.tasks.runtime import utcnow

# No worker runs here, but the hints are real Redis messages (and the cluster's
# fixtures create a PostgreSQL database even for its SQLite store).
pytestmark = [pytest.mark.redis, pytest.mark.postgres]

INVOICE = {"customer_id": "cus_1", "amount_cents": 1200, "currency": "EUR"}


def _wait_until_due_for_republish(cluster: Cluster, refs: list[str]) -> None:
    """Until every step's last publish is older than ``republish_after``."""
    store = cluster.client.runtime.store
    after = timedelta(seconds=cluster.settings.sweep.republish_after)

    def due() -> bool:
        stamps = [store.get(ref).published_at for ref in refs]
        return all(stamp is not None and stamp + after < utcnow() for stamp in stamps)

    cluster.wait_for(due, timeout=10 + 2 * after.total_seconds(), what="the hints to be due")


# Seconds (times the machine factor): the hints re-sent by one sweep must not be due
# again at the next, run right after it; at 0.2 s a loaded machine's second sweep came
# late enough to re-send the first one's five again.
REPUBLISH_AFTER = 1.0


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path, machine: Machine) -> Iterator[Cluster]:
    after = machine.seconds(REPUBLISH_AFTER)
    env = {"TOOLSAFE_SWEEP_BATCH": "5", "TOOLSAFE_REPUBLISH_AFTER": f"{after:.2f}"}
    with cluster_for(
        pg_url, redis_url, pipeline_dir, suffix="backlog", env=env, sqlite=True
    ) as running:
        yield running


def test_backlog_counts_waiting_hints_and_defers_republishing(
    cluster: Cluster, redis_url: str
) -> None:
    flush_broker(redis_url)
    client = cluster.client
    publisher = client.app.publisher
    assert publisher.backlog() == 0
    refs = [new_ref("backlog") for _ in range(8)]
    for ref in refs:
        client.submit("create_invoice", INVOICE, operation_ref=ref)
    # No worker runs: the 8 submit hints wait in the execute queue.
    assert publisher.backlog() == 8

    _wait_until_due_for_republish(cluster, refs)
    counts = sweeper.sweep(client.runtime, publisher, publisher.backlog)
    assert counts["republished"] == 0, "8 waiting hints > batch of 5: nothing re-published"
    assert publisher.backlog() == 8

    flush_broker(redis_url)  # the hints are lost, as after a Redis restart
    assert publisher.backlog() == 0
    first = sweeper.sweep(client.runtime, publisher, publisher.backlog)
    assert first["republished"] == 5
    second = sweeper.sweep(client.runtime, publisher, publisher.backlog)
    assert second["republished"] == 3
    assert publisher.backlog() == 8


def test_an_unreadable_backlog_does_not_stop_the_sweep(cluster: Cluster, redis_url: str) -> None:
    flush_broker(redis_url)
    client = cluster.client
    ref = new_ref("backlog-unknown")
    client.submit("create_invoice", INVOICE, operation_ref=ref)
    flush_broker(redis_url)
    store = client.runtime.store
    pending = [step.operation_ref for step in store.list_steps(None, 100)]
    _wait_until_due_for_republish(cluster, pending)
    counts = sweeper.sweep(client.runtime, client.app.publisher, lambda: None)
    # Every hint was lost (this module's earlier steps' too): a full batch goes out.
    expected = min(cluster.settings.sweep.batch, len(pending))
    assert counts["republished"] == expected
    assert client.app.publisher.backlog() == expected
