"""Leases against real workers, PostgreSQL and a downstream that does not deduplicate:
a dead pool process is recovered in about a second, a dead node after its lease, a long
call is kept alive by its heartbeat, and a paused process never writes twice.

The timings here are the feature, so every one is derived from the settings, and the
settings from the machine: the lease, the heartbeat and the time limits are their base
values times the session's machine factor (tests/support/machine.py), so that a starved
machine (a CPU hog per core) neither misses a heartbeat nor a bound; a failed bound names
its base and the factor."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import needs_proc
from tests.support.machine import Machine
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness import Process
from toolsafe.recovery.owners import LeaseOwner
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import EventRecord
from toolsafe.tasks.faults import fired, write_plan
from toolsafe.tasks.runtime import utcnow

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_18", "amount_cents": 1800, "currency": "EUR"}
# Base values (an idle machine); the cluster runs with them times the machine factor.
LEASE = 2.0
TIME_LIMIT = 8.0
WINDOW = 0.5


@pytest.fixture(scope="module")
def lease_cluster(
    pg_url: str, redis_url: str, pipeline_dir: Path, machine: Machine
) -> Iterator[Cluster]:
    # A short lease kept alive by a heartbeat, a time limit well beyond it, and an adapter
    # timeout that lets a stalled downstream hold a stored write for seconds.
    scaled = machine.seconds
    env = {
        "TOOLSAFE_LEASE_SECONDS": f"{scaled(LEASE):.2f}",
        "TOOLSAFE_HEARTBEAT_INTERVAL": f"{scaled(0.4):.2f}",
        "TOOLSAFE_TASK_TIME_LIMIT": f"{scaled(TIME_LIMIT):.2f}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{scaled(7):.2f}",
        "TOOLSAFE_EXAMPLE_TIMEOUT": f"{scaled(6):.2f}",
        "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": str(WINDOW),
    }
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="leases", env=env) as running:
        yield running


@pytest.fixture
def cluster(lease_cluster: Cluster) -> Iterator[Cluster]:
    write_plan(Path(lease_cluster.env["TOOLSAFE_FAULT_PLAN"]), {})
    yield lease_cluster
    lease_cluster.stop_workers()


def _owner(cluster: Cluster, ref: str) -> LeaseOwner:
    step = cluster.client.runtime.store.get(ref)
    owner = LeaseOwner.parse(step.lease_owner)
    assert owner is not None, step
    return owner


def _first(events: list[EventRecord], kind: str, to: StepState | None = None) -> EventRecord:
    for event in events:
        if event.kind == kind and (to is None or event.to_state is to):
            return event
    raise AssertionError(f"no {kind} event to {to}: {[(e.kind, e.to_state) for e in events]}")


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _pool_child_holding(cluster: Cluster, ref: str, worker: Process) -> int:
    cluster.wait_for(
        lambda: cluster.client.runtime.store.get(ref).lease_owner is not None,
        what="the claim",
    )
    pid = _owner(cluster, ref).pid
    assert pid != worker.pid  # a pool child, not the worker's main process
    return pid


def test_a_killed_pool_process_is_verified_in_about_a_second(
    cluster: Cluster, machine: Machine
) -> None:
    # A lease of 8 s (times the factor): recovered within ~1 s, so not by its expiry.
    lease = machine.seconds(8)
    worker = cluster.start_worker(
        "pool",
        concurrency=1,
        beat=False,
        extra_env={
            "TOOLSAFE_LEASE_SECONDS": f"{lease:.2f}",
            "TOOLSAFE_HEARTBEAT_INTERVAL": f"{lease / 8:.2f}",
        },
    )
    ref = new_ref("lease/child")
    cluster.fault(fault="stall_after_store", operation_ref=ref, seconds=lease + 2)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    child = _pool_child_holding(cluster, ref, worker)
    cluster.wait_for(lambda: cluster.effects(ref) == 1, timeout=15, what="the stored write")
    killed = utcnow()
    os.kill(child, signal.SIGKILL)
    view = cluster.client.wait(ref, timeout=15)
    assert view.state is S.SUCCEEDED, cluster.logs()
    events = cluster.client.runtime.store.events(ref)
    expired = _first(events, "lease_expired", S.VERIFYING)
    assert expired.detail.get("owner_gone") is True  # proven dead, not timed out
    succeeded = _first(events, "looked_up", S.SUCCEEDED)
    # "About a second" is the feature (the worker sees its child die), well inside the
    # lease; verified, never executed again.
    assert _seconds(expired.at, killed) <= machine.seconds(1.5), machine.explain(1.5)
    assert _seconds(succeeded.at, killed) <= machine.seconds(4.0), machine.explain(4.0)
    assert expired.at < succeeded.at
    assert cluster.effects(ref) == 1  # naive downstream: no execution after the write
    assert cluster.violations([ref]) == []


def test_a_killed_node_is_recovered_after_its_lease(cluster: Cluster, machine: Machine) -> None:
    victim = cluster.start_worker("node", concurrency=1, beat=False)
    ref = new_ref("lease/node")
    cluster.fault(fault="stall_after_store", operation_ref=ref, seconds=10)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    cluster.wait_for(lambda: cluster.effects(ref) == 1, timeout=15, what="the stored write")
    victim.kill()  # the main process and its children: nobody saw them die
    lease_end = cluster.client.runtime.store.get(ref).lease_expires_at
    assert lease_end is not None
    cluster.start_worker("rescuer", concurrency=1, beat=True)
    ready = utcnow()
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    expired = _first(cluster.client.runtime.store.events(ref), "lease_expired", S.VERIFYING)
    assert expired.at >= lease_end  # by the lease's expiry: a short one, renewed no more
    # Taken over within a couple of sweeps of the later of the lease's end and the
    # rescuer's start (its start is no feature: it is not counted).
    sweeps = 2 * cluster.settings.sweep.interval + 1.0
    since = _seconds(expired.at, max(lease_end, ready))
    assert since <= machine.seconds(sweeps), (since, machine.explain(sweeps))
    assert cluster.effects(ref) == 1  # naive downstream: no execution after the write


def test_a_call_longer_than_the_lease_is_not_taken_for_dead(cluster: Cluster) -> None:
    cluster.start_worker("long", concurrency=2, beat=True)
    ref = new_ref("lease/long")
    # 2.5 lease lengths inside the call, under the time limit and the adapter's timeout.
    lease = cluster.settings.calls.lease
    cluster.fault(fault="stall_after_store", operation_ref=ref, seconds=2.5 * lease)
    started = time.monotonic()
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20 + 3 * lease)
    assert time.monotonic() - started >= 2.5 * lease
    assert view.state is S.SUCCEEDED, cluster.logs()
    # The promise: the heartbeat kept the lease, so the call was never taken for dead.
    events = cluster.client.runtime.store.events(ref)
    assert not [event for event in events if event.kind == "lease_expired"], cluster.logs()
    # Taken for dead would have been lease_expired → verifying. A starved downstream that
    # outlasts the adapter's own timeout is an unknown outcome verified as stored: honest,
    # and no second write either way (the downstream is naive: it would store it).
    assert cluster.effects(ref) == 1


def _stopped(cluster: Cluster, ref: str, point: str) -> int:
    """Wait until the pool child that took ``ref`` stopped itself at ``point``."""
    plan = f"{cluster.env['TOOLSAFE_FAULT_PLAN']}.fired"
    cluster.wait_for(
        lambda: any(f["entry"] == ref and f["point"] == point for f in fired(plan)),
        what=f"the stop at {point}",
    )
    pid = _owner(cluster, ref).pid

    def is_stopped() -> bool:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"

    cluster.wait_for(is_stopped, what="the stopped process")
    return pid


@needs_proc
def test_a_paused_process_resumed_after_recovery_has_its_late_result_refused(
    cluster: Cluster,
) -> None:
    """Paused after its write and before recording: the step is verified (found) while
    it sleeps; woken up, its result is refused and nothing is written twice."""
    ref = new_ref("lease/paused-after")
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {ref: {"after_call": "stop"}})
    worker = cluster.start_worker("paused", concurrency=2, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    pid = _stopped(cluster, ref, "after_call")
    view = cluster.client.wait(ref, timeout=cluster.settings.calls.time_limit - 1)
    assert view.state is S.SUCCEEDED, cluster.logs()
    os.kill(pid, signal.SIGCONT)
    cluster.wait_for(lambda: f"lease_lost {ref}" in worker.text(), what="the late result refused")
    # Verified while it slept (found), and its late result recorded nowhere.
    events = cluster.client.runtime.store.events(ref)
    assert [event.kind for event in events if event.kind == "executed"] == []
    _first(events, "looked_up", S.SUCCEEDED)  # raises unless the lookup found it
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


@needs_proc
def test_a_paused_process_never_sends_after_its_step_was_taken_over(cluster: Cluster) -> None:
    """Paused after its claim and before its call: verification finds nothing but does
    not send the write again before the call's time limit has passed; woken up, the
    paused process sees its lease gone and sends nothing. One effect."""
    ref = new_ref("lease/paused-before")
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {ref: {"before_call": "stop"}})
    worker = cluster.start_worker("paused", concurrency=2, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    pid = _stopped(cluster, ref, "before_call")
    store = cluster.client.runtime.store
    cluster.wait_for(lambda: store.get(ref).state is S.VERIFYING, what="the lease expired")
    os.kill(pid, signal.SIGCONT)
    cluster.wait_for(lambda: f"lease_lost {ref}" in worker.text(), what="the woken call refused")
    time_limit = cluster.settings.calls.time_limit
    view = cluster.client.wait(ref, timeout=time_limit + 10)
    assert view.state is S.SUCCEEDED, cluster.logs()
    events = store.events(ref)
    claims = [
        event
        for event in events
        if event.kind == "claimed" and event.detail.get("claim") == "execute"
    ]
    assert len(claims) >= 2, [(event.kind, event.to_state) for event in events]
    # The write went out again only once the first call could no longer be running (a
    # lower bound: the safety, from the settings the cluster runs with).
    assert claims[1].at - claims[0].at >= timedelta(seconds=time_limit + WINDOW)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []
