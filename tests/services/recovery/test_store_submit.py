"""One-transaction submission and events written with their state change, on
PostgreSQL (one statement each) and SQLite (two statements): what the hot path keeps."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.support.recovery.store_support import INPUT, LEASE, POLICY, T0, WRITE, success, unknown
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


def test_a_stamped_step_is_left_to_the_sweeper_until_republish_after(store: StepStore) -> None:
    done = store.submit(
        "create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0, published_at=T0
    )
    assert done.step.published_at == T0 and store.get(REF).published_at == T0
    wait = timedelta(seconds=30)
    # The publish that followed the commit may be lost: the sweeper re-drives it, later.
    assert store.due_work(T0 + timedelta(seconds=29), limit=10, republish_after=wait) == []
    [due] = store.due_work(T0 + wait, limit=10, republish_after=wait)
    assert due.operation_ref == REF and due.published_at == T0 + wait


def test_each_state_change_appends_exactly_its_event(store: StepStore) -> None:
    store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    claim = store.claim_execution(REF, "worker-1", LEASE, T0)
    assert claim is not None
    recorded = store.record(
        claim, Executed(unknown(REF)), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None
    check = T0 + timedelta(seconds=20)
    verifying = store.claim_verification(REF, "worker-2", LEASE, check)
    assert verifying is not None
    events = store.events(REF)
    assert [(e.kind, e.from_state, e.to_state) for e in events] == [
        ("submitted", None, S.PENDING),
        ("claimed", S.PENDING, S.IN_FLIGHT),
        ("executed", S.IN_FLIGHT, S.VERIFYING),
        ("claimed", S.VERIFYING, S.VERIFYING),
    ]
    claimed, executed, leased = events[1:]
    assert claimed.label == "claimed by a worker"
    assert claimed.detail == {
        "claim": "execute",
        "owner": "worker-1",
        "attempt": 1,
        "lease_expires_at": (T0 + LEASE).isoformat(),
    }
    assert executed.label == recorded.decision.label and executed.at == T0
    assert executed.detail["envelope"] == recorded.step.last_envelope
    assert executed.detail["action"] == recorded.decision.action
    assert leased.detail == {
        "claim": "verify",
        "owner": "worker-2",
        "lease_expires_at": (check + LEASE).isoformat(),
    }


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
