"""The release timer's statement (``release_parked``) on every store: a delay parked in
the store goes out once per due time, ``max_eta`` ahead, and nothing else does."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    retry_later,
    success,
    unknown,
)
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepRecord, StorePort

S = StepState
MINUTE = timedelta(minutes=1)
DUE = T0 + timedelta(minutes=10)


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


def submit(store: StorePort, ref: str) -> None:
    store.submit("create_invoice", {**INPUT, "ref": ref}, operation_ref=ref, policy=POLICY, now=T0)


def recorded(store: StorePort, ref: str, envelope_for: Callable[[str], Any]) -> None:
    submit(store, ref)
    claim = store.claim_execution(ref, "worker-1", LEASE, T0)
    assert claim is not None
    store.record(
        claim,
        Executed(envelope_for(ref)),
        traits=WRITE,
        policy=POLICY,
        now=T0,
        rng=random.Random(7),
    )


def parked(store: StorePort, ref: str, due: datetime = DUE) -> datetime:
    """A step waiting to retry at ``due``, its hint not sent (beyond max_eta)."""
    recorded(store, ref, lambda r: retry_later(r, due))
    step = store.get(ref)
    assert step.state is S.WAITING_RETRY and step.due_at is not None
    return step.due_at


def refs(found: Sequence[StepRecord]) -> list[str]:
    return [step.operation_ref for step in found]


def test_a_parked_delay_is_released_once_its_due_time_is_within_the_horizon(
    store: StorePort,
) -> None:
    due = parked(store, "r1")
    before, events = store.get("r1"), store.events("r1")
    assert store.release_parked(T0, due - timedelta(microseconds=1), limit=10) == []
    [released] = store.release_parked(T0, due, limit=10)
    assert released.operation_ref == "r1" and released.published_at == due
    # Bookkeeping: the version and the events are the step's own.
    assert released.version == before.version and store.events("r1") == events
    assert store.get("r1") == released
    # Once per due time, however often the timer looks.
    assert store.release_parked(T0 + MINUTE, due + MINUTE, limit=10) == []
    # Lost after its release: the sweep's due_work sends it republish_after past due.
    assert store.due_work(due + timedelta(seconds=29), 10, timedelta(seconds=30)) == []
    assert refs(store.due_work(due + timedelta(seconds=30), 10, timedelta(seconds=30))) == ["r1"]


def test_only_waiting_unleased_steps_without_their_hint_are_released(store: StorePort) -> None:
    parked(store, "waiting")
    submit(store, "pending")
    recorded(store, "done", success)
    recorded(store, "checking", unknown)  # verifying, its lookup due (no hint stamped)
    held = parked(store, "sent")
    store.mark_published("sent", held)  # its ETA hint went out at decision time
    recorded(store, "leased", unknown)
    lookup_due = store.get("leased").due_at
    assert lookup_due is not None
    assert store.claim_verification("leased", "checker", LEASE, lookup_due) is not None
    horizon = DUE + MINUTE
    found = store.release_parked(T0, horizon, limit=10)
    assert sorted(refs(found)) == ["checking", "waiting"]
    assert {step.state for step in found} == {S.WAITING_RETRY, S.VERIFYING}


def test_release_follows_due_time_and_limit(store: StorePort) -> None:
    for n in (3, 1, 2):
        parked(store, f"r{n}", DUE + timedelta(seconds=n))
    horizon = DUE + MINUTE
    assert refs(store.release_parked(T0, horizon, limit=2)) == ["r1", "r2"]
    assert refs(store.release_parked(T0, horizon, limit=2)) == ["r3"]
    with pytest.raises(ValueError, match="horizon"):
        store.release_parked(T0, T0 - timedelta(seconds=1), limit=1)


def test_concurrent_releasers_hand_each_step_out_once(store: StorePort) -> None:
    for n in range(30):
        parked(store, f"r{n:02}", DUE + timedelta(seconds=n))
    start = threading.Barrier(4)
    taken: list[str] = []
    lock = threading.Lock()

    def release() -> None:
        start.wait()
        while batch := store.release_parked(T0, DUE + MINUTE, limit=4):
            with lock:
                taken.extend(refs(batch))

    threads = [threading.Thread(target=release) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == [f"r{n:02}" for n in range(30)]
