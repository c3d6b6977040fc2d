"""Duplicate delivery: the same execution message many times, two workers and two
sweepers at once, 200 steps → exactly one downstream effect each (R1, R3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.metrics.truth import both
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import EXECUTE_TASK
from toolsafe.metrics.exporter import Exporter
from toolsafe.recovery.reasons import NOOP_REASONS
from toolsafe.recovery.states import TERMINAL, StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.tally import SqlTally

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

STEPS = 200


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="duplicates") as running:
        # Two workers, each with its own beat: two sweepers race as well.
        first = running.start_worker("dup-a", concurrency=2, beat=True, wait=False)
        second = running.start_worker("dup-b", concurrency=2, beat=True, wait=False)
        first.wait_ready()
        second.wait_ready()
        yield running


def test_duplicate_messages_and_two_workers_give_one_effect_each(cluster: Cluster) -> None:
    client = cluster.client
    app = client.app
    refs = [new_ref(f"dup/{number}") for number in range(STEPS)]
    for number, ref in enumerate(refs):
        client.submit(
            "create_invoice",
            {"customer_id": f"cus_{number}", "amount_cents": 100 + number, "currency": "EUR"},
            operation_ref=ref,
        )
        # The very same message (one task id) twice, as a redelivery would bring it;
        # every fourth step also gets three more independent hints.
        task_id = str(uuid.uuid4())
        for _ in range(2):
            app.send_task(EXECUTE_TASK, args=(ref,), task_id=task_id)
        if number % 4 == 0:
            for _ in range(3):
                app.send_task(EXECUTE_TASK, args=(ref,))
    store = client.runtime.store
    cluster.wait_for(
        lambda: all(step.state in TERMINAL for step in store.list_steps(None, STEPS + 10)),
        timeout=120,
        interval=0.5,
        what="every step terminal",
    )
    steps = {step.operation_ref: step for step in store.list_steps(None, STEPS + 10)}
    assert {ref for ref in refs if steps[ref].state is not StepState.SUCCEEDED} == set()
    # The promise, whatever path a step took (a lease may expire under a starved
    # machine and a step be verified, so the count of claims and no-ops is no promise):
    # exactly one downstream effect per operation_ref, and the store agreeing with itself.
    effects = cluster.downstream.effects()
    assert {ref: effects.get(ref, 0) for ref in refs if effects.get(ref, 0) != 1} == {}
    assert cluster.violations(refs) == []
    # Every hint that found nothing to do said why, in the catalogue's words.
    reasons = {
        e.detail.get("reason") for ref in refs for e in store.events(ref) if e.kind == "noop"
    }
    assert reasons and reasons <= set(NOOP_REASONS)


def test_the_exporter_counts_two_workers_commits_exactly_once(cluster: Cluster) -> None:
    """Followed live while two workers (and two sweepers) commit concurrently, the
    exporter's figures end equal to the store's own, not one share per worker."""
    client = cluster.client
    store = client.runtime.store
    assert isinstance(store, StepStore)
    exporter = Exporter(SqlTally(store), poll_interval=0.02).start()
    try:
        refs = [new_ref(f"dup-metrics/{number}") for number in range(20)]
        for number, ref in enumerate(refs):
            client.submit(
                "create_invoice",
                {"customer_id": f"cus_m{number}", "amount_cents": 7, "currency": "EUR"},
                operation_ref=ref,
            )
            client.app.send_task(EXECUTE_TASK, args=(ref,))  # a duplicate hint each
        cluster.wait_for(
            lambda: all(store.get(ref).state in TERMINAL for ref in refs),
            timeout=60,
            what="every step terminal",
        )
        figures: list[tuple[dict[str, object], ...]] = []

        def agree() -> bool:
            figures[:] = [both(store, exporter)]
            return figures[0][0] == figures[0][1]

        # Late duplicate hints still add noop events for a moment: wait for quiet.
        cluster.wait_for(agree, timeout=30, interval=0.2, what="exporter == store")
    finally:
        exporter.stop()
    mine, truth = figures[0]
    assert mine["submitted"] == truth["submitted"] == len(store.list_steps(None, 10_000))
    assert sum(mine["refused"].values()) + sum(mine["idle"].values()) >= 20  # type: ignore[attr-defined]
    assert exporter.follower.abandoned == 0
