"""The sweeper's side of the store: expired leases (R4), due work (R7), publishing."""

from __future__ import annotations

from datetime import timedelta

from tests.support.recovery.store_support import (
    LEASE,
    POLICY,
    T0,
    WRITE,
    create_step,
)
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

S = StepState
MINUTE = timedelta(minutes=1)


def _in_flight(store: StepStore, ref: str) -> None:
    create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    assert store.claim_execution(ref, "worker-1", LEASE, T0) is not None


def test_expire_leases_respects_its_limit(store: StepStore) -> None:
    for index in range(5):
        _in_flight(store, f"r{index}")
    first = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, limit=3)
    second = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, limit=3)
    assert len(first) == 3 and len(second) == 2
    assert {r.step.operation_ref for r in first + second} == {f"r{i}" for i in range(5)}


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


def test_due_work_returns_verifying_steps_whose_lease_is_over(store: StepStore) -> None:
    _in_flight(store, "r1")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    due = store.get("r1").due_at
    assert due is not None
    assert store.claim_verification("r1", "checker", LEASE, due) is not None
    assert store.due_work(due + LEASE - timedelta(seconds=1), 10, MINUTE) == []
    [step] = store.due_work(due + LEASE, 10, MINUTE)
    assert step.state is S.VERIFYING
