"""A worker cut off, not killed: one worker reaches PostgreSQL and Redis only through a
fault proxy (toolsafe/harness/proxy.py) that black-holes both while the worker holds a
lease (before its downstream call, during it, after it). Its lease runs out, a second
worker and beat on the direct URLs verify the step to its true outcome, the partition
heals, and the cut-off worker records nothing and sends nothing for that step; it lives
on and takes the next call.

The cut-off worker consumes only the execution queue and the rescuer everything else, so
that which worker holds the lease is known up front, not raced for."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import needs_proc
from tests.support.machine import Machine
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import ESCALATION_QUEUE, EXECUTE_QUEUE, SWEEP_QUEUE, VERIFY_QUEUE
from toolsafe.harness import Partition, Process
from toolsafe.recovery.owners import LeaseOwner
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import fired, write_plan

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
    needs_proc,
]

S = StepState
INVOICE = {"customer_id": "cus_29", "amount_cents": 2900, "currency": "EUR"}
# Base values (an idle machine), times the machine factor: a short lease, and a time
# limit long enough for a call, a partition and the heal (the pool would otherwise kill
# the cut-off call's process: killed, not cut off).
LEASE = 2.0
TIME_LIMIT = 10.0
WINDOW = 0.5


@pytest.fixture(scope="module")
def partitioned(
    pg_url: str, redis_url: str, pipeline_dir: Path, machine: Machine
) -> Iterator[tuple[Cluster, Partition, Process]]:
    scaled = machine.seconds
    env = {
        "TOOLSAFE_LEASE_SECONDS": f"{scaled(LEASE):.2f}",
        "TOOLSAFE_HEARTBEAT_INTERVAL": f"{scaled(0.4):.2f}",
        "TOOLSAFE_TASK_TIME_LIMIT": f"{scaled(TIME_LIMIT):.2f}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{scaled(TIME_LIMIT - 1):.2f}",
        "TOOLSAFE_EXAMPLE_TIMEOUT": f"{scaled(6):.2f}",
        "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": str(WINDOW),
    }
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="partition", env=env) as cluster:
        partition = Partition(
            cluster.env["TOOLSAFE_DATABASE_URL"], cluster.env["TOOLSAFE_BROKER_URL"]
        )
        try:
            cut_off = cluster.start_worker(
                "cut-off",
                concurrency=1,
                beat=False,
                queues=(EXECUTE_QUEUE,),
                extra_env=partition.env(),
            )
            cluster.start_worker(
                "rescuer",
                concurrency=2,
                beat=True,
                queues=(VERIFY_QUEUE, ESCALATION_QUEUE, SWEEP_QUEUE),
            )
            yield cluster, partition, cut_off
        finally:
            partition.heal()
            cluster.stop_workers()
            partition.close()


@pytest.fixture
def cut(
    partitioned: tuple[Cluster, Partition, Process],
) -> Iterator[tuple[Cluster, Partition, Process]]:
    cluster, partition, worker = partitioned
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {})
    yield partitioned
    partition.heal()
    assert worker.alive(), cluster.logs()


def _stopped(cluster: Cluster, ref: str, point: str) -> int:
    """The pid of the pool process that took ``ref``, once it stopped itself at ``point``."""
    plan = f"{cluster.env['TOOLSAFE_FAULT_PLAN']}.fired"
    cluster.wait_for(
        lambda: any(f["entry"] == ref and f["point"] == point for f in fired(plan)),
        what=f"the stop at {point}",
    )
    owner = LeaseOwner.parse(cluster.client.runtime.store.get(ref).lease_owner)
    assert owner is not None
    pid = owner.pid

    def is_stopped() -> bool:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"

    cluster.wait_for(is_stopped, what="the stopped process")
    return pid


def _owned_by(cluster: Cluster, ref: str, worker: Process) -> bool:
    owner = LeaseOwner.parse(cluster.client.runtime.store.get(ref).lease_owner)
    if owner is None:
        return False
    with open(f"/proc/{owner.pid}/stat", encoding="ascii") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1]) == worker.pid  # its pool child


def _verified_then_healed(
    cluster: Cluster, partition: Partition, worker: Process, ref: str, truth: StepState
) -> None:
    """While the worker is cut off, the rescuer verifies the step to ``truth``; then the
    partition heals and the cut-off worker's call for ``ref`` ends with nothing recorded."""
    store = cluster.client.runtime.store
    cluster.wait_for(
        lambda: store.get(ref).state is truth,
        timeout=30,
        what=f"the rescuer's verification of {ref}",
    )
    assert partition.blackholed  # still cut off: the rescuer did it alone
    events_while_cut = len(store.events(ref))
    partition.heal()
    cluster.wait_for(lambda: f"lease_lost {ref}" in worker.text(), what="the late call refused")
    # Nothing written for the step since the heal: the late call's writes are fenced. A
    # hint that arrives twice (R1), such as a verification's re-sent by the sweeper, may
    # still reach the terminal step and be refused, with a ``noop`` event and no change.
    late = store.events(ref)[events_while_cut:]
    assert all(event.kind == "noop" and event.to_state is truth for event in late), late
    assert store.get(ref).state is truth
    executed = [e for e in store.events(ref) if e.kind == "executed"]
    assert executed == [], [(e.kind, e.to_state) for e in store.events(ref)]


def _fresh_call(cluster: Cluster, worker: Process) -> str:
    """After the heal the cut-off worker (the only one on the execution queue) lives on
    and takes the next call."""
    assert worker.alive(), cluster.logs()
    ref = new_ref("partition/after")
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    cluster.wait_for(lambda: f"execute_recorded {ref}" in worker.text(), what="its record")
    return ref


def test_cut_off_after_the_claim_sends_nothing(cut: tuple[Cluster, Partition, Process]) -> None:
    """Cut off between the claim and the call: the heartbeat cannot renew, so once the
    lease could have run out the call is not sent; verification finds nothing, and the
    write goes out once, after the heal, from a new claim."""
    cluster, partition, worker = cut
    ref = new_ref("partition/before")
    lease = cluster.settings.calls.lease
    # Stopped just after the claim (the network is cut while it sleeps), then running
    # with its heartbeat thread live but black-holed for 1.5 leases before the call.
    write_plan(
        Path(cluster.env["TOOLSAFE_FAULT_PLAN"]),
        {ref: {"after_claim": "stop", "before_call": f"pause:{1.5 * lease:.2f}"}},
    )
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    pid = _stopped(cluster, ref, "after_claim")
    assert _owned_by(cluster, ref, worker)
    partition.cut()
    os.kill(pid, signal.SIGCONT)
    cluster.wait_for(
        lambda: f"lease_lost {ref}" in worker.text(), timeout=30, what="the send refused"
    )
    assert cluster.effects(ref) == 0  # nothing sent while cut off
    cluster.wait_for(
        lambda: cluster.client.runtime.store.get(ref).state is not S.IN_FLIGHT,
        timeout=30,
        what="the lease expired",
    )
    partition.heal()
    view = cluster.client.wait(ref, timeout=60)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1
    refs = [ref, _fresh_call(cluster, worker)]
    assert cluster.violations(refs) == []


def test_cut_off_during_the_call_records_nothing(cut: tuple[Cluster, Partition, Process]) -> None:
    """Cut off while the downstream holds the call (the write stored, the answer not yet
    sent): the answer comes back to a worker that cannot record it; the rescuer finds
    the write, and after the heal the worker's late result is refused."""
    cluster, partition, worker = cut
    ref = new_ref("partition/during")
    cluster.fault(
        fault="stall_after_store", operation_ref=ref, seconds=cluster.settings.calls.lease
    )
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    cluster.wait_for(lambda: cluster.effects(ref) == 1, what="the stored write")
    assert _owned_by(cluster, ref, worker)
    partition.cut()
    _verified_then_healed(cluster, partition, worker, ref, S.SUCCEEDED)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1  # naive downstream: no execution after the write
    assert cluster.violations([ref, _fresh_call(cluster, worker)]) == []


def test_cut_off_after_the_answer_records_nothing(cut: tuple[Cluster, Partition, Process]) -> None:
    """Cut off with the downstream's answer in hand and the record not yet written (R5):
    the rescuer verifies the write, and after the heal the record is refused."""
    cluster, partition, worker = cut
    ref = new_ref("partition/after-call")
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {ref: {"after_call": "stop"}})
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    pid = _stopped(cluster, ref, "after_call")
    assert _owned_by(cluster, ref, worker)
    partition.cut()
    os.kill(pid, signal.SIGCONT)
    _verified_then_healed(cluster, partition, worker, ref, S.SUCCEEDED)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1  # naive downstream: no execution after the write
    assert cluster.violations([ref, _fresh_call(cluster, worker)]) == []
