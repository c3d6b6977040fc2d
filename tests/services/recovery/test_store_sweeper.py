"""The sweeper's side of the store: expired leases (R4), due work (R7), publishing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.recovery.store_support import (
    BLIND_WRITE,
    LEASE,
    POLICY,
    READ,
    T0,
    WRITE,
    create_step,
    force,
)
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.sql import StepStore

S = StepState
MINUTE = timedelta(minutes=1)


def _in_flight(store: StepStore, ref: str) -> None:
    create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    assert store.claim_execution(ref, "worker-1", LEASE, T0) is not None


def test_expired_execution_lease_goes_to_verification(store: StepStore) -> None:
    _in_flight(store, "r1")
    assert (
        store.expire_leases(
            T0 + LEASE - timedelta(microseconds=1), lambda _: WRITE, lambda _: POLICY
        )
        == []
    )
    [recorded] = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    step = recorded.step
    assert (step.state, step.commit_state, step.lease_owner) == (S.VERIFYING, "unknown", None)
    assert step.attempts == 1
    event = store.events("r1")[-1]
    assert (event.kind, event.from_state, event.to_state) == (
        "lease_expired",
        S.IN_FLIGHT,
        S.VERIFYING,
    )
    assert event.detail["owner"] == "worker-1"
    # Never straight back to execution (R4).
    assert store.claim_execution("r1", "worker-2", LEASE, T0 + MINUTE) is None
    assert store.expire_leases(T0 + MINUTE, lambda _: WRITE, lambda _: POLICY) == []


@pytest.mark.parametrize(("traits", "state"), [(BLIND_WRITE, S.ESCALATED), (READ, S.WAITING_RETRY)])
def test_expired_lease_follows_the_tools_traits(
    store: StepStore, traits: ToolTraits, state: StepState
) -> None:
    _in_flight(store, "r1")
    [recorded] = store.expire_leases(T0 + LEASE, lambda _: traits, lambda _: POLICY)
    assert recorded.step.state is state


def test_expired_verification_lease_is_released(store: StepStore) -> None:
    _in_flight(store, "r1")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    due = store.get("r1").due_at
    assert due is not None
    claim = store.claim_verification("r1", "checker", LEASE, due)
    assert claim is not None
    [recorded] = store.expire_leases(due + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert recorded.step.state is S.VERIFYING and recorded.step.lease_owner is None
    assert recorded.step.due_at == due + LEASE
    assert store.claim_verification("r1", "checker-2", LEASE, due + LEASE) is not None


def test_expire_leases_respects_its_limit(store: StepStore) -> None:
    for index in range(5):
        _in_flight(store, f"r{index}")
    first = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, limit=3)
    second = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, limit=3)
    assert len(first) == 3 and len(second) == 2
    assert {r.step.operation_ref for r in first + second} == {f"r{i}" for i in range(5)}


def test_due_work_publishes_each_due_step_once_per_interval(store: StepStore) -> None:
    for index in range(3):
        create_step(store, "t", {"i": index}, operation_ref=f"r{index}", policy=POLICY, now=T0)
    create_step(store, "t", {}, operation_ref="future", policy=POLICY, now=T0 + MINUTE)
    due = store.due_work(T0, limit=10, republish_after=MINUTE)
    assert [step.operation_ref for step in due] == ["r0", "r1", "r2"]
    assert all(step.published_at == T0 for step in due)
    assert all(step.version == 1 for step in due)  # bookkeeping, not a state change
    assert store.due_work(T0 + timedelta(seconds=59), limit=10, republish_after=MINUTE) == []
    # Equal due times: the step id breaks the tie, so a limit takes the oldest steps.
    again = store.due_work(T0 + MINUTE, limit=2, republish_after=MINUTE)
    assert [step.operation_ref for step in again] == ["r0", "r1"]
    rest = store.due_work(T0 + MINUTE, limit=2, republish_after=MINUTE)
    assert [step.operation_ref for step in rest] == ["r2", "future"]
    assert [e.kind for e in store.events("r0")] == ["submitted"]


def test_due_work_order_is_the_due_time_then_the_step_id(store: StepStore) -> None:
    """Many steps due at the same instant, created out of order of their refs: each
    limited batch is the next ids in order, never an arbitrary pick among equals."""
    refs = [f"tie{index:02d}" for index in range(12)]
    for ref in reversed(refs):  # ids ascend in creation order: tie11 gets the lowest
        create_step(store, "t", {"r": ref}, operation_ref=ref, policy=POLICY, now=T0)
    create_step(store, "t", {}, operation_ref="earlier", policy=POLICY, now=T0 - MINUTE)
    taken: list[str] = []
    while batch := store.due_work(T0, limit=5, republish_after=MINUTE):
        taken += [step.operation_ref for step in batch]
    assert taken == ["earlier", *reversed(refs)]


def test_due_work_skips_leased_in_flight_and_waiting_steps(store: StepStore) -> None:
    _in_flight(store, "checking")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    now = T0 + MINUTE
    assert store.claim_verification("checking", "checker", LEASE, now) is not None
    create_step(store, "t", {}, operation_ref="running", policy=POLICY, now=now)
    assert store.claim_execution("running", "worker-1", LEASE, now) is not None
    create_step(store, "t", {}, operation_ref="human", policy=POLICY, now=T0)
    force(store, "human", state="needs_input")  # due_at stays in the past
    create_step(store, "t", {}, operation_ref="future", policy=POLICY, now=now + MINUTE)
    assert store.due_work(now, limit=10, republish_after=MINUTE) == []
    # A minute later the verification lease is over and "future" is due.
    later = store.due_work(now + MINUTE, limit=10, republish_after=MINUTE)
    assert {step.operation_ref for step in later} == {"checking", "future"}


def test_due_work_returns_verifying_steps_whose_lease_is_over(store: StepStore) -> None:
    _in_flight(store, "r1")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    due = store.get("r1").due_at
    assert due is not None
    assert store.claim_verification("r1", "checker", LEASE, due) is not None
    assert store.due_work(due + LEASE - timedelta(seconds=1), 10, MINUTE) == []
    [step] = store.due_work(due + LEASE, 10, MINUTE)
    assert step.state is S.VERIFYING


def test_due_work_needs_a_positive_republish_interval(store: StepStore) -> None:
    with pytest.raises(ValueError, match="republish_after"):
        store.due_work(T0, limit=1, republish_after=timedelta(0))


def test_mark_published(store: StepStore) -> None:
    step, _ = create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    store.mark_published("r1", T0 + MINUTE)
    after = store.get("r1")
    assert after.published_at == T0 + MINUTE and after.version == step.version
    assert store.due_work(T0 + MINUTE, 10, MINUTE) == []
    with pytest.raises(StepNotFound):
        store.mark_published("ghost", T0)
