"""One-transaction submission and events written with their state change, on
PostgreSQL (one statement each) and SQLite (two statements): what the hot path keeps."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from sqlalchemy import delete

from tests.support.recovery.databases import end_connections
from tests.support.recovery.store_support import INPUT, LEASE, POLICY, T0, WRITE, success
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.records import Submitted
from toolsafe.recovery.schema import step_events
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Claim, OperationRefConflict
from toolsafe.recovery.store.sql import StepStore

S = StepState
RNG = random.Random(11)
REF = "run_81/step_4"


def test_submit_returns_the_submitted_event_as_stored(store: StepStore) -> None:
    done = store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    assert done.created and done.event is not None
    assert store.events(REF) == [done.event]
    assert (done.event.kind, done.event.from_state, done.event.to_state) == (
        "submitted",
        None,
        S.PENDING,
    )
    assert done.event.detail == {
        "tool": "create_invoice",
        "input_hash": done.step.input_hash,
        "max_attempts": 3,
    }
    assert store.get(REF) == done.step and done.step.published_at is None


def test_submit_again_returns_the_step_without_an_event(store: StepStore) -> None:
    first = store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    later = T0 + timedelta(seconds=5)
    again = store.submit("create_invoice", dict(INPUT), operation_ref=REF, policy=POLICY, now=later)
    assert not again.created and again.event is None and again.step == first.step
    assert len(store.events(REF)) == 1
    with pytest.raises(OperationRefConflict, match="input"):
        store.submit("create_invoice", {"amount": 1}, operation_ref=REF, policy=POLICY, now=T0)
    assert len(store.events(REF)) == 1


def test_a_compare_and_set_that_loses_appends_no_event(store: StepStore) -> None:
    store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    claim = store.claim_execution(REF, "worker-1", LEASE, T0)
    assert claim is not None
    before = store.events(REF)
    forged = Claim("execute", "intruder", claim.step)
    outcome = Executed(success(REF))
    assert store.record(forged, outcome, traits=WRITE, policy=POLICY, now=T0, rng=RNG) is None
    assert store.events(REF) == before
    assert store.record(claim, outcome, traits=WRITE, policy=POLICY, now=T0, rng=RNG) is not None
    # The same claim again: its version moved on, so nothing is written twice.
    assert store.record(claim, outcome, traits=WRITE, policy=POLICY, now=T0, rng=RNG) is None
    assert [e.kind for e in store.events(REF)] == ["submitted", "claimed", "executed"]


def test_submits_of_one_ref_at_once_make_one_step_and_each_gets_it(store: StepStore) -> None:
    # The losers of the race meet the winner's row (ON CONFLICT DO NOTHING) and read it
    # back: on PostgreSQL after the winner's statement committed on its own.
    callers = 6
    start = threading.Barrier(callers)
    answers: list[Submitted] = []
    failures: list[BaseException] = []

    def submit() -> None:
        start.wait()
        try:
            answers.append(
                store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
            )
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=submit) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and len(answers) == callers
    assert sum(answer.created for answer in answers) == 1
    assert {answer.step.id for answer in answers} == {store.get(REF).id}
    assert [event.kind for event in store.events(REF)] == ["submitted"]


@pytest.mark.postgres
def test_a_submit_leaves_its_pooled_connection_transactional(
    pg_store: StepStore, store_pg_url: str
) -> None:
    # PostgreSQL's submit runs as its own statement (autocommit); the connection goes back
    # to the pool as it came, so the next caller's transaction still rolls back.
    engine = make_engine(store_pg_url, pool_size=1, max_overflow=0)  # one connection
    try:
        store = StepStore(engine)
        store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
        with engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
            conn.execute(delete(step_events).where(step_events.c.operation_ref == REF))
            conn.rollback()
        assert [event.kind for event in store.events(REF)] == ["submitted"]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_submit_on_a_connection_that_died_in_the_pool_commits_once(
    pg_store: StepStore,
) -> None:
    # The submit does not ping its connection: the dead one fails its statement before
    # anything is written, and the infrastructure retry submits on a new one.
    pg_store.submit("create_invoice", INPUT, operation_ref="warm", policy=POLICY, now=T0)
    assert end_connections(pg_store.engine.url.render_as_string(hide_password=False)) >= 1
    done = pg_store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    assert done.created and pg_store.get(REF) == done.step
    assert pg_store.events(REF) == [done.event]
