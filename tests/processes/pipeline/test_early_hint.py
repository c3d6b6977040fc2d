"""An ETA hint that arrives a few milliseconds before its step is due, on a real worker
and real PostgreSQL: the worker's claim is refused as ``not_due`` with the due time, the
worker waits out the rest and claims once more (``tasks/early.py``), so the call runs
once, at or after its due time on the database's clock, and never waits for a sweeper.

There is no sweeper here at all (no beat): a hint refused as early, as every early hint
was before, would leave its step pending for good. Each step is committed due a moment
ahead with no hint, then one hint is sent with an ETA :data:`EARLY` before that due
time, inside the wait's bound whatever the clocks' uncertainty (``EARLY_ALLOWANCE``).
Whether a hint is still early when its claim runs depends on the worker's timer and
pool on a machine shared with others; batches are sent until one was (the promise is
asserted of every step either way)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import ESCALATION_QUEUE, EXECUTE_QUEUE, EXECUTE_TASK, VERIFY_QUEUE
from toolsafe.recovery.reasons import NOOP_NOT_DUE
from toolsafe.recovery.states import TERMINAL, StepState
from toolsafe.tasks.clock import EARLY_ALLOWANCE
from toolsafe.tasks.new_step import new_step

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_early", "amount_cents": 1200, "currency": "EUR"}
EARLY = EARLY_ALLOWANCE * 0.9  # ahead of the due time, within any worker's bound
AHEAD = timedelta(seconds=0.5)  # the first due time, from when a batch is sent
APART = timedelta(milliseconds=40)  # between two steps' due times
BATCH = 4
BATCHES = 6


@pytest.fixture(scope="module")
def early_cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="early") as running:
        yield running


@pytest.fixture(params=["prefork", "threads"])
def cluster(early_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A worker of the pool under test, without beat: no sweeper and no release timer
    to fall back on, only the hint runs a step."""
    early_cluster.start_worker(
        f"early-{request.param}",
        pool=request.param,
        concurrency=2,
        beat=False,
        queues=(EXECUTE_QUEUE, VERIFY_QUEUE, ESCALATION_QUEUE),
    )
    yield early_cluster
    early_cluster.stop_workers()


def _send_early(cluster: Cluster, refs: list[str]) -> dict[str, datetime]:
    """Commit each step due a moment ahead (no hint), then send its one hint ``EARLY``
    before its due time on this process's clock; the due times (the database's)."""
    runtime = cluster.client.runtime
    start = runtime.now() + AHEAD
    due = {ref: start + n * APART for n, ref in enumerate(refs)}
    for ref, due_at in due.items():
        call = new_step(runtime, "create_invoice", INVOICE, ref)
        [submitted] = runtime.store.submit_many([call], now=due_at)
        assert submitted.step.due_at == due_at and submitted.step.published_at is None
    for ref, due_at in due.items():
        eta = runtime.clock.to_local(due_at) - EARLY
        cluster.client.app.send_task(EXECUTE_TASK, args=(ref,), eta=eta)
    return due


def _waited(cluster: Cluster, ref: str) -> bool:
    """Whether the step's hint was refused as early before the claim that ran it."""
    kinds = [
        (event.kind, event.detail.get("reason"))
        for event in cluster.client.runtime.store.events(ref)
    ]
    return ("noop", NOOP_NOT_DUE) in kinds and kinds.index(("noop", NOOP_NOT_DUE)) < kinds.index(
        ("claimed", None)
    )


def test_an_early_hint_runs_its_step_once_at_its_due_time(cluster: Cluster) -> None:
    store = cluster.client.runtime.store
    waited = 0
    sent = 0
    while not waited and sent < BATCHES:
        sent += 1
        refs = [new_ref(f"early_{sent}/step") for _ in range(BATCH)]
        due = _send_early(cluster, refs)
        for ref in refs:
            cluster.wait_for(
                lambda ref=ref: store.get(ref).state in TERMINAL,  # type: ignore[misc]
                timeout=10,
                what=f"{ref} run by its early hint (no sweeper here)",
            )
        for ref in refs:
            step = store.get(ref)
            assert step.state is S.SUCCEEDED, (ref, cluster.states(ref), cluster.logs())
            assert cluster.effects(ref) == 1 and step.attempts == 1
            [claimed] = [event for event in store.events(ref) if event.kind == "claimed"]
            # Claimed at or after the due time on the database's clock, never before (R6).
            assert claimed.at >= due[ref], (ref, claimed.at, due[ref])
            assert step.last_sent_at == claimed.at
        assert cluster.violations(refs) == []
        waited += sum(_waited(cluster, ref) for ref in refs)
    # Proof that the wait ran: some hint was still early when its claim came (else every
    # step of these batches was claimed on time and proved nothing about the wait).
    assert waited, f"no hint of {sent} batches arrived early: {cluster.logs()}"
    assert "execute_early" in cluster.logs()
