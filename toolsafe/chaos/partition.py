"""``toolsafe chaos --partitions N``: one worker of the run reaches the database and the
broker only through fault proxies (``toolsafe.harness.proxy``); N times it is cut off
while it holds a lease (when it holds one within a few seconds), for longer than the
lease, and healed. Its leases run out and the other workers and beat verify its steps;
after the heal its late results are refused (docs/chaos.md)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path

from toolsafe.harness import Partition, Process
from toolsafe.recovery.store import StorePort
from toolsafe.tasks.lease import owner_prefix

FIND_LEASE = 10.0  # seconds: how long a round waits for the worker to hold a lease


def worker_pids(worker: Process) -> list[int]:
    """The worker's main process and its pool processes (a solo worker has none; Linux's
    ``/proc/<pid>/task/*/children``): whichever runs a call owns its lease."""
    pids = [worker.pid]
    with contextlib.suppress(OSError, ValueError):
        for task in Path(f"/proc/{worker.pid}/task").iterdir():
            pids += [int(pid) for pid in (task / "children").read_text().split()]
    return pids


def holds_lease(store: StorePort, prefix: str, worker: Process) -> bool:
    """Whether ``worker`` (its main process or a pool process of it) leases a step of
    the run (``prefix``) now."""
    try:
        held = [
            step for pid in worker_pids(worker) for step in store.leases_held_by(owner_prefix(pid))
        ]
    except Exception:  # a connection killed by the run itself: not now
        return False
    return any(step.operation_ref.startswith(prefix) for step in held)


def partition_round(
    partition: Partition,
    worker: Process,
    store: StorePort,
    prefix: str,
    lease: float,
    faults: Counter[str],
) -> None:
    """Cut ``worker`` off for twice the lease and a second, then heal."""
    deadline = time.monotonic() + FIND_LEASE
    while time.monotonic() < deadline and not holds_lease(store, prefix, worker):
        time.sleep(0.05)
    held = holds_lease(store, prefix, worker)
    partition.cut()
    try:
        time.sleep(2 * lease + 1)
    finally:
        partition.heal()
    faults["worker partition"] += 1
    if held:
        faults["worker partition with a lease held"] += 1
