"""One-transaction submission and events written with their state change, on
PostgreSQL (one statement each) and SQLite (two statements): what the hot path keeps."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.support.recovery.store_support import INPUT, LEASE, POLICY, T0, WRITE, success
from toolsafe.recovery.outcomes import Executed
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
