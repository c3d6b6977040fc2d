"""Several processes on one database at once (PostgreSQL, and the SQLite file of the
embedded demo): of many claims of one step exactly one wins; sweepers running at the
same time never hand out the same step twice."""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.support.recovery.store_support import LEASE, POLICY, T0, contend, create_step
from tests.support.recovery.stores import empty
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

PROCESSES = 4
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def shared_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # Spawned children get this sys.path: they import the contender from tests/.
    monkeypatch.syspath_prepend(str(ROOT))
    if request.param == "postgresql":
        engine: Engine = request.getfixturevalue("store_pg_engine")
        empty(engine)
        yield request.getfixturevalue("store_pg_url")
    else:
        yield request.getfixturevalue("sqlite_url")


def _race(url: str, refs: list[str]) -> dict[str, list[str]]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES, timeout=60)
    results = context.Queue()
    workers = [
        context.Process(target=contend, args=(url, refs, barrier, results, f"w{i}"))
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    found: dict[str, list[str]] = {}
    deadline = time.monotonic() + 60
    while len(found) < len(workers):
        try:
            name, won = results.get(timeout=0.5)
        except queue.Empty:
            crashed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            assert not crashed, f"a contending process failed: exit codes {crashed}"
            assert time.monotonic() < deadline, "the contending processes did not finish"
            continue
        found[name] = won
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    return found


@pytest.mark.slow
def test_processes_racing_on_one_database(shared_url: str) -> None:
    """Of simultaneous claims of one step exactly one wins; then the same processes,
    as sweepers at once, never hand out a step twice (due work, then expired leases)."""
    engine = make_engine(shared_url)
    store = StepStore(engine)
    raced = [f"race_{index}" for index in range(6)]
    pending = [f"due_{index}" for index in range(30)]
    crashed = [f"run_{index}" for index in range(30)]
    for ref in raced + pending + crashed:
        create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    for ref in crashed:
        assert store.claim_execution(ref, "crashed-worker", LEASE, T0) is not None

    found = _race(shared_url, raced)

    handed_out = Counter(item for won in found.values() for item in won)
    assert max(handed_out.values()) == 1
    assert set(handed_out) == (
        {f"claimed:{ref}" for ref in raced}
        | {f"due:{ref}" for ref in pending}
        | {f"expired:{ref}" for ref in raced + crashed}
    )
    for ref in raced:
        kinds = Counter(event.kind for event in store.events(ref))
        # One claim won, every other process got a noop naming why.
        assert (kinds["claimed"], kinds["noop"]) == (1, PROCESSES - 1)
    for ref in raced + crashed:
        step = store.get(ref)
        assert (step.state, step.attempts) == (StepState.VERIFYING, 1)
        assert [event.kind for event in store.events(ref)].count("lease_expired") == 1
    engine.dispose()


@pytest.mark.postgres
def test_a_claim_that_waited_on_another_writer_labels_its_event_with_the_new_state(
    pg_store: StepStore,
) -> None:
    """The claim reads the prior state under a row lock: when another transaction moves
    the step from one claimable state to another while the claim waits, the ``claimed``
    event names the state the step really left (without the lock it said ``pending``)."""
    import threading

    from sqlalchemy import text, update

    from toolsafe.recovery.schema import steps

    store = pg_store
    create_step(store, "create_invoice", {"n": 1}, operation_ref="race/1", policy=POLICY, now=T0)
    mover = store.engine.connect()
    transaction = mover.begin()
    # The mover holds a row lock: a failing look must not leave it held for the tests
    # after this one (they share the database).
    try:
        mover.execute(
            update(steps)
            .where(steps.c.operation_ref == "race/1")
            .values(state="waiting_retry", version=steps.c.version + 1)
        )
        claimed: list[object] = []
        claimer = threading.Thread(
            target=lambda: claimed.append(store.claim_execution("race/1", "w1", LEASE, T0 + LEASE))
        )
        mover_pid = mover.execute(text("SELECT pg_backend_pid()")).scalar_one()
        claimer.start()
        # Observed, not assumed: a backend is blocked on the mover's row lock.
        deadline = time.monotonic() + 10
        with store.engine.connect() as watcher:
            while True:
                blocked = watcher.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE :pid = ANY(pg_blocking_pids(pid))"
                    ),
                    {"pid": mover_pid},
                ).scalar_one()
                # pg_stat_activity is read once per transaction (its snapshot is cached until
                # the transaction ends): a new transaction each look, or it never changes.
                watcher.rollback()
                if blocked:
                    break
                assert time.monotonic() < deadline, "the claim never waited on the row lock"
                time.sleep(0.01)
        assert claimer.is_alive()
        transaction.commit()
    finally:
        if transaction.is_active:
            transaction.rollback()
        mover.close()
    claimer.join(timeout=10)
    assert claimed and claimed[0] is not None, "the claim must win once the mover commits"
    event = store.events("race/1")[-1]
    assert event.kind == "claimed"
    assert event.from_state is StepState.WAITING_RETRY
    assert event.to_state is StepState.IN_FLIGHT
