"""A delay longer than TOOLSAFE_MAX_ETA is parked in the store, and the release timer in
beat's process sends it out ahead of its due time: the retry runs at its not_before,
with the sweep and the republish rule too slow here to be what sent it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.machine import Machine
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_1", "amount_cents": 4200, "currency": "EUR"}
# Retries beyond 1 s are parked; a sweep every 20 s and a republish after 60 s would
# send a parked retry 4 s ahead only after 16 s or more.
SLOW_SWEEPER = {
    "TOOLSAFE_MAX_ETA": "1",
    "TOOLSAFE_SWEEP_INTERVAL": "20",
    "TOOLSAFE_REPUBLISH_AFTER": "60",
}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(
        pg_url, redis_url, pipeline_dir, suffix="release", env=SLOW_SWEEPER
    ) as running:
        running.start_worker("release", concurrency=2)
        yield running


def test_a_parked_retry_is_released_and_runs_at_its_not_before(
    cluster: Cluster, machine: Machine
) -> None:
    ref = new_ref("run_9/step_1")
    cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=4)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    cluster.wait_for(lambda: store.get(ref).state is S.WAITING_RETRY, what="the rate limit")
    waiting = store.get(ref)
    assert waiting.due_at is not None
    # Parked: no hint for the retry went out when it was decided (it is 4 s ahead).
    assert waiting.published_at is None or waiting.published_at < waiting.due_at
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    events = store.events(ref)
    # The rate limit's own event (a lease lost on a starved machine may add another).
    limited = next(e for e in events if e.to_state is S.WAITING_RETRY and "envelope" in e.detail)
    not_before = datetime.fromisoformat(limited.detail["envelope"]["retry"]["not_before"])
    retried = [e for e in events if e.kind == "claimed" and e.at > limited.at]
    assert retried, "the retry was never claimed"
    lateness = (retried[0].at - not_before).total_seconds()
    # Never early; late by less than the sweep would be (16 s or more here), by a bound
    # that grows with the machine factor.
    assert lateness >= 0, lateness
    assert lateness < machine.seconds(3), (lateness, machine.explain(3), cluster.logs())
    assert store.get(ref).published_at == waiting.due_at  # released for its due time
    assert cluster.went_through(ref, S.WAITING_RETRY, S.IN_FLIGHT, S.SUCCEEDED)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


def test_a_released_retry_runs_ahead_of_a_backlog_of_new_submissions(
    cluster: Cluster,
) -> None:
    """The retry's hint goes in the recovery lane: it runs at its ``not_before`` while new
    submissions sent after its rate limit still wait, instead of behind all of them.
    Order only, no time bound: the backlog (24 calls of at least 0.3 s each on the
    worker's two processes) outlasts the retry's 2 s delay by seconds, and a slower
    machine makes it longer still."""
    ref = new_ref("run_10/retry")
    cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=2)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    cluster.wait_for(lambda: store.get(ref).state is S.WAITING_RETRY, what="the rate limit")
    backlog = [new_ref(f"run_10/new_{n}") for n in range(24)]
    for queued in backlog:
        cluster.fault(fault="stall_after_store", operation_ref=queued, seconds=0.3)
    cluster.client.submit_many(
        [("create_invoice", INVOICE, queued) for queued in backlog], actor="test"
    )
    for done in (ref, *backlog):
        assert cluster.client.wait(done, timeout=60).state is S.SUCCEEDED, cluster.logs()

    def claims(of: str) -> list[datetime]:
        return [event.at for event in store.events(of) if event.kind == "claimed"]

    retried = claims(ref)[-1]
    last_new = max(claims(queued)[0] for queued in backlog)
    assert retried < last_new, (retried, last_new, cluster.logs())
    assert all(cluster.effects(done) == 1 for done in (ref, *backlog))
    assert cluster.violations([ref, *backlog]) == []
