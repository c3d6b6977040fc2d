"""The sweeper defers re-publishing while hints already wait in the broker.

Without the guard, a queue that drains slower than TOOLSAFE_REPUBLISH_AFTER got every
queued step re-published on every sweep (found by the long chaos run).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness import flush_broker
from toolsafe.tasks import pipeline

INVOICE = {"customer_id": "cus_1", "amount_cents": 1200, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    env = {"TOOLSAFE_SWEEP_BATCH": "5", "TOOLSAFE_REPUBLISH_AFTER": "0.2"}
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

    time.sleep(0.4)  # past republish_after: every step is due for a re-publish
    counts = pipeline.sweep(client.runtime, publisher, publisher.backlog)
    assert counts["republished"] == 0, "8 waiting hints > batch of 5: nothing re-published"
    assert publisher.backlog() == 8

    flush_broker(redis_url)  # the hints are lost, as after a Redis restart
    assert publisher.backlog() == 0
    first = pipeline.sweep(client.runtime, publisher, publisher.backlog)
    assert first["republished"] == 5
    second = pipeline.sweep(client.runtime, publisher, publisher.backlog)
    assert second["republished"] == 3
    assert publisher.backlog() == 8


def test_an_unreadable_backlog_does_not_stop_the_sweep(cluster: Cluster, redis_url: str) -> None:
    flush_broker(redis_url)
    client = cluster.client
    ref = new_ref("backlog-unknown")
    client.submit("create_invoice", INVOICE, operation_ref=ref)
    flush_broker(redis_url)
    time.sleep(0.4)
    counts = pipeline.sweep(client.runtime, client.app.publisher, lambda: None)
    assert counts["republished"] >= 1
