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
    force,
    noop_counts,
    retry_later,
    success,
    unknown,
)
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
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


def _verifying(store: StepStore, ref: str = "run_81/step_4") -> None:
    claim = _claimed(store, ref)
    recorded = store.record(
        claim, Executed(unknown(ref)), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None and recorded.step.state is S.VERIFYING


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


def test_reads_of_a_missing_step(store: StepStore) -> None:
    with pytest.raises(StepNotFound, match="nope"):
        store.get("nope")
    assert store.events("nope") == []


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


def test_claim_execution_takes_a_lease_and_counts_the_attempt(store: StepStore) -> None:
    claim = _claimed(store)
    step = claim.step
    assert (claim.kind, claim.owner) == ("execute", "worker-1")
    assert (step.state, step.attempts, step.version) == (S.IN_FLIGHT, 1, 2)
    assert (step.lease_owner, step.lease_expires_at, step.last_sent_at) == (
        "worker-1",
        T0 + LEASE,
        T0,
    )
    assert store.get(step.operation_ref) == step
    event = store.events(step.operation_ref)[-1]
    assert (event.kind, event.from_state, event.to_state) == ("claimed", S.PENDING, S.IN_FLIGHT)
    assert event.label == "claimed by a worker" and event.detail["attempt"] == 1


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


def _noop_reason(store: StepStore, ref: str) -> str:
    event = store.events(ref)[-1]
    assert event.kind == "noop" and event.detail["claim"] == "execute"
    reason: str = event.detail["reason"]
    return reason


def test_claim_execution_refusals_are_answers_with_a_reason(store: StepStore) -> None:
    _claimed(store, "busy")
    version = store.get("busy").version
    assert store.claim_execution("busy", "worker-2", LEASE, T0) is None
    assert _noop_reason(store, "busy") == "claimed"
    assert store.get("busy").version == version  # a refusal changes nothing

    create_step(store, "t", {}, operation_ref="later", policy=POLICY, now=T0 + LEASE)
    assert store.claim_execution("later", "w", LEASE, T0) is None
    assert _noop_reason(store, "later") == "not_due"

    _verifying(store, "unknown")
    assert store.claim_execution("unknown", "w", LEASE, T0 + LEASE) is None
    assert _noop_reason(store, "unknown") == "unknown_outcome"

    create_step(store, "t", {}, operation_ref="old", policy=POLICY, now=T0)
    force(store, "old", commit_state="unknown")  # whatever the state says, unknown wins
    assert store.claim_execution("old", "w", LEASE, T0) is None
    assert _noop_reason(store, "old") == "unknown_outcome"

    create_step(store, "t", {}, operation_ref="spent", policy=POLICY, now=T0)
    force(store, "spent", state="waiting_retry", attempts=3)
    assert store.claim_execution("spent", "w", LEASE, T0) is None
    assert _noop_reason(store, "spent") == "attempts_spent"

    claim = _claimed(store, "done")
    store.record(claim, Executed(success("done")), traits=WRITE, policy=POLICY, now=T0, rng=RNG)
    assert store.claim_execution("done", "w", LEASE, T0) is None
    assert _noop_reason(store, "done") == "terminal"

    claim = _claimed(store, "human")
    store.record(
        claim, Executed(correct_input("human")), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert store.claim_execution("human", "w", LEASE, T0) is None
    assert _noop_reason(store, "human") == "waiting_on_human"

    assert store.claim_execution("ghost", "w", LEASE, T0) is None
    assert _noop_reason(store, "ghost") == "missing"

    counts = noop_counts(store)
    assert counts == {
        "not_due": 1,
        "claimed": 1,
        "unknown_outcome": 2,
        "terminal": 1,
        "waiting_on_human": 1,
        "attempts_spent": 1,
        "missing": 1,
    }


def test_a_retried_claim_that_had_committed_is_still_ours(store: StepStore) -> None:
    claim = _claimed(store)
    again = store.claim_execution(claim.step.operation_ref, "worker-1", LEASE, T0)
    assert again is not None and again.step == claim.step
    assert [event.kind for event in store.events(claim.step.operation_ref)] == [
        "submitted",
        "claimed",
    ]


# ------------------------------------------------------------------ claim_verification


def test_claim_verification_leases_a_due_verifying_step(store: StepStore) -> None:
    _verifying(store, "r1")
    due = store.get("r1").due_at
    assert due is not None
    assert store.claim_verification("r1", "checker", LEASE, due - timedelta(seconds=1)) is None
    claim = store.claim_verification("r1", "checker", LEASE, due)
    assert claim is not None and claim.kind == "verify"
    assert (claim.step.state, claim.step.lease_owner) == (S.VERIFYING, "checker")
    assert claim.step.attempts == 1  # a lookup is not an execution
    assert store.claim_verification("r1", "other", LEASE, due) is None
    event = store.events("r1")[-1]
    assert (event.kind, event.detail) == ("noop", {"claim": "verify", "reason": "claimed"})
    # Once the lease is over, another checker may take it.
    assert store.claim_verification("r1", "other", LEASE, due + LEASE) is not None


def test_claim_verification_refuses_steps_that_are_not_verifying(store: StepStore) -> None:
    create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    assert store.claim_verification("r1", "checker", LEASE, T0) is None
    assert store.claim_verification("ghost", "checker", LEASE, T0) is None
    assert store.events("ghost")[-1].detail["reason"] == "missing"


# ------------------------------------------------------------------ record


def test_record_success_writes_the_decision_and_the_envelope(store: StepStore) -> None:
    claim = _claimed(store)
    ref = claim.step.operation_ref
    recorded = store.record(
        claim, Executed(success(ref)), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None
    step = recorded.step
    assert (step.state, step.commit_state, step.lease_owner, step.due_at) == (
        S.SUCCEEDED,
        "committed",
        None,
        None,
    )
    assert step.last_envelope is not None and step.last_envelope["ok"] is True
    assert step.version == claim.step.version + 1
    assert recorded.decision.evidence_ref == "inv_1"
    event = store.events(ref)[-1]
    assert (event.kind, event.from_state, event.to_state) == ("executed", S.IN_FLIGHT, S.SUCCEEDED)
    assert event.detail["envelope"] == step.last_envelope
    assert event.detail["evidence_ref"] == "inv_1"


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
    assert step.max_attempts == 2  # min(policy 3, attempts 1 + 1 remaining)


def test_record_after_the_lease_was_lost_writes_nothing(store: StepStore) -> None:
    claim = _claimed(store)
    ref = claim.step.operation_ref
    expired = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert [r.step.state for r in expired] == [S.VERIFYING]
    before = store.events(ref)
    late = store.record(
        claim, Executed(success(ref)), traits=WRITE, policy=POLICY, now=T0 + LEASE, rng=RNG
    )
    assert late is None
    assert store.get(ref).state is S.VERIFYING and store.events(ref) == before


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
    ("result", "state"),
    [
        (LookupFound(checked_at=T0, result={"id": 1}, evidence_ref="inv_9"), S.SUCCEEDED),
        (LookupNotFound(checked_at=T0), S.WAITING_RETRY),
        (LookupUnavailable(checked_at=T0), S.VERIFYING),
    ],
)
def test_record_lookup_results(
    store: StepStore, result: LookupFound | LookupNotFound | LookupUnavailable, state: StepState
) -> None:
    _verifying(store, "r1")
    now = T0 + timedelta(minutes=1)  # past the consistency window
    claim = store.claim_verification("r1", "checker", LEASE, now)
    assert claim is not None
    recorded = store.record(claim, LookedUp(result), traits=WRITE, policy=POLICY, now=now, rng=RNG)
    assert recorded is not None and recorded.step.state is state
    assert recorded.step.lease_owner is None and recorded.step.attempts == 1
    if isinstance(result, LookupFound):
        # The model now sees the success verification proved, not the stale unknown.
        assert recorded.step.last_envelope == {
            "ok": True,
            "operation_ref": "r1",
            "commit_state": "committed",
            "result": {"id": 1},
            "verification": {"checked_at": "2026-03-01T12:00:00Z", "evidence_ref": "inv_9"},
        }
    elif isinstance(result, LookupNotFound):
        # Found absent: the model is told the write did not happen and will be retried.
        shown = recorded.step.last_envelope
        assert shown is not None and shown["code"] == "OPERATION_NOT_FOUND"
        assert shown["commit_state"] == "not_committed" == recorded.step.commit_state
        assert shown["next_action"] == "wait_and_retry"
    else:
        assert recorded.step.last_envelope == store.events("r1")[2].detail["envelope"]
    event = store.events("r1")[-1]
    assert event.kind == "looked_up" and "result" not in event.detail["lookup"]
    if isinstance(result, LookupUnavailable):
        assert recorded.step.lookups_unavailable == 1
        assert event.detail["lookup"] == {
            "checked_at": T0.isoformat(),
            "unavailable": True,
            "code": "LOOKUP_UNSPECIFIED",
        }


def test_record_a_stale_outcome_is_refused_and_writes_nothing(store: StepStore) -> None:
    _verifying(store, "r1")
    now = T0 + timedelta(minutes=1)
    claim = store.claim_verification("r1", "checker", LEASE, now)
    assert claim is not None
    with pytest.raises(TransitionRefused) as raised:
        store.record(claim, Executed(success("r1")), traits=WRITE, policy=POLICY, now=now, rng=RNG)
    assert raised.value.code == "STALE_OUTCOME"
    assert store.get("r1") == claim.step


@pytest.mark.parametrize(
    "error",
    [StepNotFound("r1"), OperationRefConflict("r1", "input"), InvalidOperationRef("a b")],
)
def test_store_errors_survive_a_pickle_round_trip(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
