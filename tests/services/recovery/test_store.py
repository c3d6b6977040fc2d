"""The step store on PostgreSQL and SQLite: submission, reads, claims and recording."""

from __future__ import annotations

import pickle
import random
from datetime import timedelta

import pytest

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    counts_by_state,
    create_step,
    retry_later,
    success,
)
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Claim, InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.recovery.store.sql import StepStore

S = StepState
RNG = random.Random(7)


def _claimed(store: StepStore, ref: str = "run_81/step_4") -> Claim:
    create_step(store, "create_invoice", INPUT, operation_ref=ref, policy=POLICY, now=T0)
    claim = store.claim_execution(ref, "worker-1", LEASE, T0)
    assert claim is not None
    return claim


# ------------------------------------------------------------------ create_step and reads


def test_create_step_commits_a_pending_step_due_now(store: StepStore) -> None:
    step, created = create_step(
        store, "create_invoice", INPUT, operation_ref="run_81/step_4", policy=POLICY, now=T0
    )
    assert created
    assert (step.state, step.due_at, step.attempts, step.max_attempts) == (S.PENDING, T0, 0, 3)
    assert step.input == INPUT and step.input_hash.startswith("sha256:")
    assert step.version == 1 and step.commit_state is None and step.lease_owner is None
    assert store.get("run_81/step_4") == step
    [event] = store.events("run_81/step_4")
    assert (event.kind, event.from_state, event.to_state) == ("submitted", None, S.PENDING)
    assert event.at == T0


def test_create_step_is_idempotent_by_operation_ref(store: StepStore) -> None:
    first, _ = create_step(
        store, "create_invoice", INPUT, operation_ref="r1", policy=POLICY, now=T0
    )
    reordered = dict(reversed(list(INPUT.items())))
    again, created = create_step(
        store, "create_invoice", reordered, operation_ref="r1", policy=POLICY, now=T0 + LEASE
    )
    assert not created and again == first
    assert len(store.events("r1")) == 1


@pytest.mark.parametrize(
    ("tool", "data", "what"),
    [("create_invoice", {**INPUT, "amount": 121}, "input"), ("send_email", INPUT, "tool")],
)
def test_create_step_refuses_the_same_ref_for_another_call(
    store: StepStore, tool: str, data: dict[str, object], what: str
) -> None:
    create_step(store, "create_invoice", INPUT, operation_ref="r1", policy=POLICY, now=T0)
    with pytest.raises(OperationRefConflict) as raised:
        create_step(store, tool, data, operation_ref="r1", policy=POLICY, now=T0)
    assert raised.value.what == what and "r1" in str(raised.value)
    assert store.get("r1").tool == "create_invoice"


def test_create_step_generates_and_checks_operation_refs(store: StepStore) -> None:
    step, created = create_step(store, "t", {}, operation_ref=None, policy=POLICY, now=T0)
    assert created and step.operation_ref.startswith("op_") and len(step.operation_ref) == 35
    with pytest.raises(InvalidOperationRef):
        create_step(store, "t", {}, operation_ref="has space", policy=POLICY, now=T0)


def test_list_steps_and_counts_by_state(store: StepStore) -> None:
    for index in range(3):
        create_step(store, "t", {"i": index}, operation_ref=f"r{index}", policy=POLICY, now=T0)
    assert store.claim_execution("r1", "w", LEASE, T0) is not None
    assert [step.operation_ref for step in store.list_steps()] == ["r2", "r1", "r0"]
    assert [step.operation_ref for step in store.list_steps([S.IN_FLIGHT])] == ["r1"]
    assert len(store.list_steps(limit=2)) == 2
    counts = counts_by_state(store)
    assert counts[S.PENDING] == 2 and counts[S.IN_FLIGHT] == 1
    assert set(counts) == set(StepState) and sum(counts.values()) == 3


# ------------------------------------------------------------------ claim_execution


def test_claim_execution_from_waiting_retry_when_due(store: StepStore) -> None:
    claim = _claimed(store, "r1")
    later = T0 + timedelta(seconds=20)
    recorded = store.record(
        claim, Executed(retry_later("r1", later)), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None and recorded.step.state is S.WAITING_RETRY
    assert recorded.step.due_at == later
    assert store.claim_execution("r1", "worker-2", LEASE, later - timedelta(seconds=1)) is None
    second = store.claim_execution("r1", "worker-2", LEASE, later)
    assert second is not None and second.step.attempts == 2
    event = store.events("r1")[-1]
    assert (event.from_state, event.label) == (S.WAITING_RETRY, "claimed by a worker when due")


def test_a_retried_claim_that_had_committed_is_still_ours(store: StepStore) -> None:
    claim = _claimed(store)
    again = store.claim_execution(claim.step.operation_ref, "worker-1", LEASE, T0)
    assert again is not None and again.step == claim.step
    assert [event.kind for event in store.events(claim.step.operation_ref)] == [
        "submitted",
        "claimed",
    ]


# ------------------------------------------------------------------ claim_verification


def test_claim_verification_refuses_steps_that_are_not_verifying(store: StepStore) -> None:
    create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    assert store.claim_verification("r1", "checker", LEASE, T0) is None
    assert store.claim_verification("ghost", "checker", LEASE, T0) is None
    assert store.events("ghost")[-1].detail["reason"] == "missing"


# ------------------------------------------------------------------ record


def test_record_correct_input_keeps_flagged_fields_and_the_loop_fingerprint(
    store: StepStore,
) -> None:
    claim = _claimed(store)
    ref = claim.step.operation_ref
    recorded = store.record(
        claim, Executed(correct_input(ref)), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None
    step = recorded.step
    assert step.state is S.NEEDS_INPUT and step.flagged_fields == ("recipient_email",)
    assert step.fingerprint is not None and step.fingerprint_repeats == 1
    # The envelope's 1 remaining allowed the corrected call; once corrected the step
    # gets the policy's whole budget again (1 claimed + 3), announced while it waits.
    assert step.max_attempts == 1 + POLICY.retry.max_attempts


def test_record_with_another_owners_claim_writes_nothing(store: StepStore) -> None:
    claim = _claimed(store)
    forged = Claim("execute", "intruder", claim.step)
    ref = claim.step.operation_ref
    assert (
        store.record(forged, Executed(success(ref)), traits=WRITE, policy=POLICY, now=T0, rng=RNG)
        is None
    )
    assert store.get(ref).state is S.IN_FLIGHT


@pytest.mark.parametrize(
    "error",
    [StepNotFound("r1"), OperationRefConflict("r1", "input"), InvalidOperationRef("a b")],
)
def test_store_errors_survive_a_pickle_round_trip(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
