"""The heartbeat against a real store (SQLite file): a held lease outlives its length, a
lease taken over stops the hold, and a process paused past its lease sends nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.recovery.store_support import POLICY, WRITE, create_step, sql_store
from toolsafe.recovery.db import migrate
from toolsafe.recovery.store import Claim
from toolsafe.settings import Settings
from toolsafe.tasks.lease import Hold, heartbeat_for
from toolsafe.tasks.runtime import Runtime, utcnow

LEASE = 0.6


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'steps.db'}"
    migrate(url)
    runtime = Runtime(
        Settings().replace(store={"url": url}, calls={"lease": LEASE, "heartbeat_interval": 0.1})
    )
    yield runtime
    runtime.close()


def _claim(runtime: Runtime, ref: str) -> tuple[Claim, float]:
    store = sql_store(runtime.store)
    create_step(store, "create_invoice", {"r": ref}, operation_ref=ref, policy=POLICY, now=utcnow())
    claimed_at = time.monotonic()
    claim = store.claim_execution(ref, runtime.owner, timedelta(seconds=LEASE), utcnow())
    assert claim is not None
    return claim, claimed_at


def _until(check: object, timeout: float = 10.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_held_lease_outlives_its_length(runtime: Runtime) -> None:
    claim, claimed_at = _claim(runtime, "h1")
    beat = heartbeat_for(runtime)
    hold = beat.hold(claim, claimed_at)
    first_expiry = claim.step.lease_expires_at
    assert first_expiry is not None
    # Three lease lengths later the lease still runs, renewed by the heartbeat thread.
    _until(lambda: time.monotonic() - claimed_at > 3 * LEASE)
    assert hold.holds()
    step = runtime.store.get("h1")
    assert step.lease_expires_at is not None and step.lease_expires_at > utcnow()
    assert runtime.store.expire_leases(utcnow(), lambda _: WRITE, lambda _: POLICY) == []
    held = beat.release(hold)
    assert held is not None and held.step.version > claim.step.version
    assert held.step.version == runtime.store.get("h1").version  # what the record guards on


def test_a_lease_taken_over_stops_the_hold(runtime: Runtime) -> None:
    claim, claimed_at = _claim(runtime, "h2")
    beat = heartbeat_for(runtime)
    hold = beat.hold(claim, claimed_at)
    taken = runtime.store.expire_lease_of_dead_owner(
        "h2", runtime.owner, utcnow(), lambda _: WRITE, lambda _: POLICY
    )
    assert taken is not None
    _until(lambda: hold.lost)
    assert not hold.holds()
    assert beat.release(hold) is None  # the call must record nothing


def test_a_hold_past_its_lease_without_renewal_no_longer_holds(runtime: Runtime) -> None:
    """As a process paused past its lease sees it when it wakes up, before any renewal
    could confirm the lease: its own clock says the lease is over, so it sends nothing.
    (If a renewal then succeeds, nobody took the step over, and the lease is its own.)"""
    claim, _ = _claim(runtime, "h3")
    paused = Hold(claim, LEASE, 60.0, time.monotonic() - 2 * LEASE)
    assert not paused.holds()
    fresh = Hold(claim, LEASE, 60.0, time.monotonic())
    assert fresh.holds()
    # Past the time limit since the claim, even a renewed lease does not let it call.
    late = Hold(claim, LEASE, 0.5, time.monotonic() - 1.0)
    late.valid_until = time.monotonic() + LEASE
    assert not late.holds()


def test_a_claim_made_late_in_its_task_keeps_only_the_time_limit_left(runtime: Runtime) -> None:
    """A verification that runs the retry it allowed claims the step well after its task
    began: the task's hard limit counts from that start, so the hold stops holding when
    the limit left at the claim runs out, not a whole limit after the claim."""
    claim, claimed_at = _claim(runtime, "h4")
    limit = runtime.settings.calls.time_limit
    beat = heartbeat_for(runtime)
    hold = beat.hold(claim, claimed_at, started=claimed_at - (limit - 0.3))
    assert hold.holds() and hold.deadline == pytest.approx(claimed_at + 0.3)
    _until(lambda: not hold.holds())
    assert not hold.lost and time.monotonic() - claimed_at < limit / 2
    assert beat.release(hold) is not None
