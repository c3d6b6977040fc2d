"""An early hint on a real worker and real PostgreSQL: the worker's claim is refused as
``not_due`` with the due time, the worker waits out the rest and claims once more
(``tasks/early.py``), so the call runs once, at or after its due time on the database's
clock, and never waits for a sweeper.

There is no sweeper here at all (no beat): a hint refused as early, as every early hint
was before, would leave its step pending for good, so a step that reaches a terminal
state at all was run by its one hint, after the wait. How early a hint may be and still
be waited out is a setting (``TOOLSAFE_EARLY_WAIT``, milliseconds by default); here it
is seconds, so that each step is committed due :func:`ahead` (seconds) after its hint is
sent — with no ETA, or an ETA well before the due time — and is certainly still early
when its claim runs, and certainly within the worker's bound: no millisecond timing
decides anything. The steps are as many as the worker has pool slots, so none waits
behind another's wait."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.machine import session_machine
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import ESCALATION_QUEUE, EXECUTE_QUEUE, EXECUTE_TASK, VERIFY_QUEUE
from toolsafe.recovery.reasons import NOOP_NOT_DUE
from toolsafe.recovery.states import TERMINAL, StepState
from toolsafe.settings import EARLY_WAIT_SHARE
from toolsafe.tasks.new_step import new_step

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_early", "amount_cents": 1200, "currency": "EUR"}
SLOTS = 2  # the worker's pool, and the steps sent at once


def ahead() -> timedelta:
    """How long after its hint is sent a step falls due: 1.5 s on the reference machine
    (times this one's measured factor), ample time for the worker to take the hint and
    find the step not yet due."""
    return timedelta(seconds=session_machine().seconds(1.5))


def early_wait() -> timedelta:
    """``TOOLSAFE_EARLY_WAIT`` here: twice :func:`ahead`, so every hint is within the
    worker's bound (this plus twice its clock's measured uncertainty)."""
    return timedelta(seconds=round(2 * ahead().total_seconds(), 3))


def _settings() -> dict[str, str]:
    """``TOOLSAFE_EARLY_WAIT`` in seconds, and a call time limit that allows it (the wait
    is at most ``EARLY_WAIT_SHARE`` of the soft limit); the broker's visibility timeout
    above the rule's (docs/operations.md) for that limit."""
    wait = early_wait().total_seconds()
    soft = wait / EARLY_WAIT_SHARE + 1
    hard = soft + 5
    return {
        "TOOLSAFE_EARLY_WAIT": f"{wait:.3f}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{soft:.3f}",
        "TOOLSAFE_TASK_TIME_LIMIT": f"{hard:.3f}",
        "TOOLSAFE_VISIBILITY_TIMEOUT": f"{2 * (hard + 10):.3f}",
    }


@pytest.fixture(scope="module")
def early_cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="early", env=_settings()) as running:
        yield running


@pytest.fixture(params=["prefork", "threads"])
def cluster(early_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A worker of the pool under test, without beat: no sweeper and no release timer
    to fall back on, only the hint runs a step."""
    early_cluster.start_worker(
        f"early-{request.param}",
        pool=request.param,
        concurrency=SLOTS,
        beat=False,
        queues=(EXECUTE_QUEUE, VERIFY_QUEUE, ESCALATION_QUEUE),
    )
    yield early_cluster
    early_cluster.stop_workers()


def _send_early(cluster: Cluster, refs: list[str]) -> dict[str, datetime]:
    """Commit each step due :func:`ahead` of now (no hint), then send its one hint: the
    first with no ETA, the others with one a third of the way to the due time (held by
    the worker, then early by the rest); the due times (the database's)."""
    runtime = cluster.client.runtime
    due_at = runtime.now() + ahead()
    for ref in refs:
        call = new_step(runtime, "create_invoice", INVOICE, ref)
        [submitted] = runtime.store.submit_many([call], now=due_at)
        assert submitted.step.due_at == due_at and submitted.step.published_at is None
    for n, ref in enumerate(refs):
        eta = runtime.clock.to_local(due_at - 2 * ahead() / 3) if n else None
        cluster.client.app.send_task(EXECUTE_TASK, args=(ref,), eta=eta)
    return dict.fromkeys(refs, due_at)


def _refused_as_early_first(cluster: Cluster, ref: str) -> bool:
    """Whether the step's hint was refused as not due before the claim that ran it."""
    kinds = [
        (event.kind, event.detail.get("reason"))
        for event in cluster.client.runtime.store.events(ref)
    ]
    early = ("noop", NOOP_NOT_DUE)
    return early in kinds and kinds.index(early) < kinds.index(("claimed", None))


def test_an_early_hint_runs_its_step_once_at_its_due_time(cluster: Cluster) -> None:
    store = cluster.client.runtime.store
    settings = cluster.settings
    assert timedelta(seconds=settings.calls.early_wait) == early_wait()
    refs = [new_ref(f"early_{n}/step") for n in range(SLOTS)]
    due = _send_early(cluster, refs)
    # Only a deadline for a wait that would never end (no sweeper: a refused hint's step
    # stays pending): the due time, the longest early wait and the call's own limit.
    patience = ahead() + early_wait() + timedelta(seconds=settings.calls.time_limit)
    for ref in refs:
        cluster.wait_for(
            lambda ref=ref: store.get(ref).state in TERMINAL,  # type: ignore[misc]
            timeout=patience.total_seconds(),
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
        # The hint came seconds early and was refused as not due, then waited out: with
        # no sweeper, nothing else could have claimed the step.
        assert _refused_as_early_first(cluster, ref), (ref, store.events(ref), cluster.logs())
    assert cluster.violations(refs) == []
