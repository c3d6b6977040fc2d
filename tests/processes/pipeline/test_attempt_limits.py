"""Attempt limits live in the database (R8): a step whose every attempt dies with its
worker is tried exactly as often as the policy allows, across worker restarts, then
escalates with ATTEMPTS_EXHAUSTED. Real workers, Redis and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import fired, write_plan

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_3", "amount_cents": 300, "currency": "EUR"}
MAX_ATTEMPTS = 3


@pytest.fixture
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    env = {
        "TOOLSAFE_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        # "Not found" soon proves the write absent, so each dead attempt is retried.
        "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "0.2",
    }
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="limits", env=env) as running:
        yield running


def test_the_attempt_limit_holds_across_killed_and_restarted_workers(cluster: Cluster) -> None:
    ref = new_ref("limits/step_1")
    plan = Path(cluster.env["TOOLSAFE_FAULT_PLAN"])
    store = cluster.client.runtime.store

    def kills() -> int:
        return sum(1 for f in fired(f"{plan}.fired") if f["operation_ref"] == ref)

    def killed_at_least(count: int) -> bool:
        return kills() >= count

    # Every execution dies after its claim, before anything is sent downstream; the
    # verifications in between run (they never pass `before_call`).
    write_plan(plan, {ref: {"before_call": {"action": "kill", "times": MAX_ATTEMPTS + 2}}})
    worker = cluster.start_worker("limits-0", concurrency=1, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        cluster.wait_for(partial(killed_at_least, attempt), timeout=30, what=f"attempt {attempt}")
        # The whole worker goes too, and a new one takes over: nothing the dead
        # processes counted in memory can carry over, only what the database holds.
        worker.kill()
        cluster.workers.remove(worker)
        worker = cluster.start_worker(f"limits-{attempt}", concurrency=1, beat=True)

    view = cluster.client.wait(ref, timeout=40)
    assert view.state is S.ESCALATED, cluster.logs()
    assert view.reason == "ATTEMPTS_EXHAUSTED"
    assert view.attempts == MAX_ATTEMPTS
    assert kills() == MAX_ATTEMPTS
    claims = [e for e in store.events(ref) if e.kind == "claimed" and e.to_state is S.IN_FLIGHT]
    assert [e.detail["attempt"] for e in claims] == list(range(1, MAX_ATTEMPTS + 1))
    # Each dead attempt was verified before the next one ran (R4); none reached the
    # downstream.
    assert cluster.went_through(
        ref,
        *[S.IN_FLIGHT, S.VERIFYING, S.WAITING_RETRY] * (MAX_ATTEMPTS - 1),
        S.IN_FLIGHT, S.VERIFYING, S.ESCALATED,
    ), cluster.states(ref)  # fmt: skip
    assert cluster.violations([ref]) == []
    assert cluster.effects(ref) == 0
