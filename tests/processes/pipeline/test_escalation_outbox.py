"""Escalation notices are delivered at least once (R9): a notice the broker lost, or one
whose handler failed, is sent again by the sweeper from the outbox until a handler run
takes it, always with the same dedup key. Real workers, Redis and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import ESCALATION_QUEUE, QUEUES
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_o", "amount_cents": 500, "currency": "EUR"}
RESEND_AFTER = "1"


@pytest.fixture
def cluster(pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    env = {"TOOLSAFE_ESCALATION_RESEND_AFTER": RESEND_AFTER}
    with cluster_for(pg_url, redis_url, tmp_path, suffix="outbox", env=env) as running:
        yield running


def _escalate(cluster: Cluster, ref: str) -> None:
    cluster.fault(fault="version_conflict", operation_ref=ref)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    cluster.wait_for(lambda: store.get(ref).state is S.ESCALATED, what="the escalation")


def _delivered(cluster: Cluster, ref: str) -> bool:
    return not cluster.client.runtime.store.outbox.notices(ref, open_only=True)


def test_a_notice_the_broker_lost_is_delivered_later_with_the_same_key(
    cluster: Cluster, redis_url: str
) -> None:
    # Nobody consumes escalations yet: the notice's message waits in its queue...
    no_escalations = tuple(q for q in QUEUES if q != ESCALATION_QUEUE)
    cluster.start_worker("no-escalations", queues=no_escalations, concurrency=1)
    ref = new_ref("outbox/lost")
    _escalate(cluster, ref)
    [owed] = cluster.client.runtime.store.outbox.notices(ref)
    assert owed.open and owed.dedup_key.startswith(f"escalation:{ref}:v")
    # ... and the broker loses it.
    client = redis.Redis.from_url(redis_url)
    try:
        cluster.wait_for(lambda: client.llen(ESCALATION_QUEUE) > 0, what="the notice's hint")
        client.delete(ESCALATION_QUEUE)
    finally:
        client.close()
    cluster.start_worker("escalations", queues=(ESCALATION_QUEUE,), concurrency=1, beat=False)
    cluster.wait_for(lambda: _delivered(cluster, ref), timeout=30, what="the re-sent notice")
    received = [n for n in cluster.webhook.received if n["operation_ref"] == ref]
    assert [n["dedup_key"] for n in received] == [owed.dedup_key], cluster.logs()
    [closed] = cluster.client.runtime.store.outbox.notices(ref)
    assert closed.outcome == "delivered" and closed.sends >= 2
    assert closed.dedup_key == owed.dedup_key


def test_a_failed_handler_gets_the_notice_again_until_it_takes_it(cluster: Cluster) -> None:
    cluster.webhook.failures = 2  # the webhook answers 503 twice, then takes it
    cluster.start_worker("outbox", concurrency=1)
    ref = new_ref("outbox/failing")
    _escalate(cluster, ref)
    cluster.wait_for(lambda: _delivered(cluster, ref), timeout=30, what="the third send")
    assert cluster.webhook.failures == 0
    [closed] = cluster.client.runtime.store.outbox.notices(ref)
    assert closed.outcome == "delivered" and closed.sends == 3, cluster.logs()
    # Delivered once to the webhook that took it, with the notice's key as its
    # Idempotency-Key.
    keys = [k for k, n in zip(cluster.webhook.keys, cluster.webhook.received, strict=True)
            if n["operation_ref"] == ref]  # fmt: skip
    assert keys == [closed.dedup_key]
