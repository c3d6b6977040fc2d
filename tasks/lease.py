"""Leases while a call runs and after its process dies: the heartbeat that keeps a live
call's short lease alive, and the recovery of a lease whose owner is proven dead.

One heartbeat thread per process renews every lease the process holds, off the calls'
threads; a renewal that fails (the lease was taken over) marks the hold lost, and a lost
hold records nothing. A dead owner's step goes to verification at once, through the
expired lease's own guarded transition (R4), never back to execution.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import replace
from datetime import timedelta

from toolsafe.recovery.owners import LeaseOwner, provably_gone, this_process
from toolsafe.recovery.states import LEASED
from toolsafe.recovery.store import Claim, Recorded, StepNotFound
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.lease")


class Hold:
    """One claim this process holds while its call runs.

    ``holds()`` is this process's own view, on its monotonic clock: the lease is not
    known lost and has not run out since its last confirmed renewal, and the task's hard
    time limit has not passed (``time_limit``: what is left of it at the claim). A
    process that was paused (SIGSTOP) past its lease wakes up with ``holds()`` false,
    before it sends anything.
    """

    def __init__(self, claim: Claim, lease: float, time_limit: float, claimed_at: float) -> None:
        self.claim = claim
        self.lease = lease
        self.claimed_at = claimed_at  # monotonic, taken before the claim's transaction
        self.valid_until = claimed_at + lease
        self.deadline = claimed_at + time_limit
        self.next_renewal = claimed_at
        self.lost = False
        self.released = False
        self.lock = threading.Lock()  # held while a renewal runs; release waits for it

    def holds(self) -> bool:
        now = time.monotonic()
        return not self.lost and now < self.valid_until and now < self.deadline


class Heartbeat:
    """The process's heartbeat thread: renews each held lease every ``interval`` s."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._held: dict[int, Hold] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        # Monotonic time the thread will wake up by (read and set under ``_lock``).
        self._wakes_at = math.inf

    @property
    def interval(self) -> float:
        return self.runtime.settings.calls.heartbeat_interval

    def hold(self, claim: Claim, claimed_at: float, started: float | None = None) -> Hold:
        """Start keeping ``claim`` alive (``claimed_at``: monotonic, before the claim;
        ``started``: when the task began, where its hard time limit counts from, if
        earlier than the claim)."""
        settings = self.runtime.settings
        limit = settings.calls.time_limit
        if started is not None:
            limit -= max(claimed_at - started, 0.0)
        hold = Hold(claim, settings.calls.lease, limit, claimed_at)
        hold.next_renewal = claimed_at + self.interval
        with self._lock:
            self._ensure_thread()
            self._held[id(hold)] = hold
            # The thread plans its next wake-up with this hold in view; it need not be
            # woken (a thread switch on every claim) when it wakes before it is due.
            wake = hold.next_renewal < self._wakes_at
        if wake:
            self._wake.set()
        return hold

    def release(self, hold: Hold) -> Claim | None:
        """Stop renewing; the claim as now held (its newest version), or None when lost."""
        with self._lock:
            self._held.pop(id(hold), None)
        with hold.lock:  # a renewal in progress finishes first
            hold.released = True
            # Not lost: the claim's newest version still guards the record (a lease
            # taken over since then moved the version on, and the record matches nothing).
            return None if hold.lost else hold.claim

    def _ensure_thread(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's thread did not come along
            self._pid = os.getpid()
            self._thread = None
            self._held.clear()
        if self._thread is None or not self._thread.is_alive():
            self._wakes_at = math.inf
            self._thread = threading.Thread(
                target=self._run, name="toolsafe-heartbeat", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                holds = list(self._held.values())
                # Until the plan below is made, a new hold must wake the thread.
                self._wakes_at = math.inf
            now = time.monotonic()
            wait = self.interval
            for hold in holds:
                if hold.next_renewal <= now:
                    self._renew(hold)
                    now = time.monotonic()
                wait = min(wait, max(hold.next_renewal - now, 0.0))
            wait = max(wait, 0.01)
            with self._lock:
                self._wakes_at = now + wait
            self._wake.wait(wait)
            self._wake.clear()

    def _renew(self, hold: Hold) -> None:
        with hold.lock:
            if hold.released or hold.lost:
                hold.next_renewal = math.inf  # nothing left to renew
                return
            started = time.monotonic()
            claim = hold.claim
            lease = timedelta(seconds=hold.lease)
            try:
                renewed = self.runtime.store.renew_lease(
                    claim.step, claim.owner, lease, self.runtime.now()
                )
            except Exception as error:  # the database is away: try again, the lease runs on
                log.warning(
                    "lease renewal failed: %s",
                    type(error).__name__,
                    extra={
                        "event": "lease_renewal_failed",
                        "operation_ref": claim.step.operation_ref,
                    },
                )
                hold.next_renewal = time.monotonic() + min(self.interval, 1.0)
                return
            if renewed is None:
                hold.lost = True
                hold.next_renewal = math.inf
                log.warning(
                    "lease taken over %s",
                    claim.step.operation_ref,
                    extra={"event": "lease_taken_over", "operation_ref": claim.step.operation_ref},
                )
                return
            hold.claim = replace(claim, step=renewed)
            hold.valid_until = started + hold.lease
            hold.next_renewal = started + self.interval


_heartbeats: dict[int, Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat_for(runtime: Runtime) -> Heartbeat:
    """The heartbeat of ``runtime`` in this process."""
    with _heartbeats_lock:
        beat = _heartbeats.get(id(runtime))
        if beat is None or beat.runtime is not runtime:
            beat = _heartbeats[id(runtime)] = Heartbeat(runtime)
        return beat


# ---------------------------------------------------------------------- dead owners


def recover_if_owner_gone(runtime: Runtime, operation_ref: str) -> Recorded | None:
    """A hint found the step leased: if its owner is provably gone (on this host), the
    step goes to verification now, through the expired lease's transition (R4)."""
    try:
        step = runtime.store.get(operation_ref)
    except StepNotFound:
        return None
    if step.state not in LEASED or step.lease_owner is None:
        return None
    if not provably_gone(step.lease_owner):
        return None
    return runtime.store.expire_lease_of_dead_owner(
        operation_ref, step.lease_owner, runtime.now(), runtime.traits_for, runtime.policy_for
    )


def recover_process(runtime: Runtime, owner_prefix: str) -> list[Recorded]:
    """Every lease a dead process of this host held (``host:pid:``) → R4 at once.

    Each owner found is checked again: a pid reused by a live process since then holds
    its leases under another start time and keeps them.
    """
    recovered: list[Recorded] = []
    for step in runtime.store.leases_held_by(owner_prefix):
        owner = step.lease_owner
        if owner is None or not provably_gone(owner):
            continue
        recorded = runtime.store.expire_lease_of_dead_owner(
            step.operation_ref, owner, runtime.now(), runtime.traits_for, runtime.policy_for
        )
        if recorded is not None:
            recovered.append(recorded)
    return recovered


def owner_prefix(pid: int) -> str:
    """``host:pid:`` of a process of this host."""
    me = this_process()
    return LeaseOwner(me.host, pid, "-", me.space).prefix
