"""The escalation outbox (R9, at least once): a notice commits with the escalation, the
sweeper hands an unacknowledged one out again with backoff, once per sweep however many
sweepers run, and its dedup key stays the same."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.support.recovery.store_support import (
    BLIND_WRITE,
    LEASE,
    POLICY,
    T0,
    WRITE,
    create_step,
    escalate,
)
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import MAX_BACKOFF_FACTOR, dedup_key, resend_delay
from toolsafe.recovery.store.sql import StepStore

S = StepState
RESEND = timedelta(seconds=60)
RNG = random.Random(3)


def _escalated(store: StepStore, ref: str) -> None:
    """In flight, lease expired, and the tool has no lookup: escalated by the sweeper."""
    create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    assert store.claim_execution(ref, "worker-1", LEASE, T0) is not None
    [recorded] = store.expire_leases(T0 + LEASE, lambda _: BLIND_WRITE, lambda _: POLICY)
    assert recorded.step.state is S.ESCALATED


def test_an_escalation_writes_its_notice_in_the_same_transaction(store: StepStore) -> None:
    _escalated(store, "e1")
    step = store.get("e1")
    [notice] = store.outbox.notices("e1")
    assert notice.open and notice.sends == 1 and notice.last_sent_at == T0 + LEASE
    assert notice.dedup_key == dedup_key("e1", step.version) == f"escalation:e1:v{step.version}"
    # Other transitions owe nobody a notice.
    create_step(store, "t", {}, operation_ref="quiet", policy=POLICY, now=T0)
    assert store.claim_execution("quiet", "worker-1", LEASE, T0) is not None
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert store.get("quiet").state is S.VERIFYING
    assert store.outbox.notices("quiet") == []


def test_an_unacknowledged_notice_is_handed_out_again_with_backoff(store: StepStore) -> None:
    _escalated(store, "e1")
    sent = T0 + LEASE
    key = store.outbox.notices("e1")[0].dedup_key
    assert store.outbox.due(sent + RESEND - timedelta(seconds=1), 10, RESEND) == []
    [again] = store.outbox.due(sent + RESEND, 10, RESEND)
    assert (again.sends, again.dedup_key) == (2, key)
    # Handed out once per wait, however often the sweeper asks.
    assert store.outbox.due(sent + RESEND, 10, RESEND) == []
    # The second wait is twice the first.
    assert store.outbox.due(sent + RESEND + RESEND * 2 - timedelta(seconds=1), 10, RESEND) == []
    [third] = store.outbox.due(sent + RESEND * 3, 10, RESEND)
    assert (third.sends, third.dedup_key) == (3, key)


def test_an_acknowledged_notice_is_never_sent_again(store: StepStore) -> None:
    _escalated(store, "e1")
    [notice] = store.outbox.notices("e1")
    assert store.outbox.acknowledge(notice.id, T0 + LEASE)
    assert not store.outbox.acknowledge(notice.id, T0 + LEASE)  # once
    [closed] = store.outbox.notices("e1")
    assert (closed.open, closed.outcome) == (False, "delivered")
    assert store.outbox.notices("e1", open_only=True) == []
    assert store.outbox.due(T0 + timedelta(days=30), 10, RESEND) == []


def test_due_notices_respect_the_limit_and_a_stable_order(store: StepStore) -> None:
    for ref in ("e0", "e1", "e2"):
        _escalated(store, ref)
    later = T0 + LEASE + RESEND
    first = store.outbox.due(later, 2, RESEND)
    second = store.outbox.due(later, 2, RESEND)
    assert [n.operation_ref for n in first + second] == ["e0", "e1", "e2"]


def test_a_second_escalation_of_the_same_step_is_a_new_notice(store: StepStore) -> None:
    ref = "e1"
    create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    for number in range(2):
        now = T0 + timedelta(minutes=number)
        claim = store.claim_execution(ref, f"worker-{number}", LEASE, now)
        assert claim is not None
        store.record(claim, Executed(escalate(ref)), traits=WRITE, policy=POLICY, now=now, rng=RNG)
        assert store.get(ref).state is S.ESCALATED
        if number == 0:  # an operator re-drives it: nothing was written (not_committed)
            store.resolve(
                ref, operator="ops", reason="try again", to=S.PENDING, traits=WRITE,
                policy=POLICY, now=now,
            )  # fmt: skip
    first, second = store.outbox.notices(ref)
    assert first.dedup_key != second.dedup_key
    assert [first.open, second.open] == [True, True]


def test_the_resend_wait_doubles_up_to_its_cap() -> None:
    assert [resend_delay(RESEND, n) / RESEND for n in range(1, 9)] == [
        1, 2, 4, 8, 16, 32, 64, 64
    ]  # fmt: skip
    assert MAX_BACKOFF_FACTOR == 64


def test_due_needs_a_positive_resend_interval(store: StepStore) -> None:
    with pytest.raises(ValueError, match="resend_after"):
        store.outbox.due(T0, 1, timedelta(0))


def test_an_unknown_outcome_is_refused(store: StepStore) -> None:
    _escalated(store, "e1")
    [notice] = store.outbox.notices("e1")
    with pytest.raises(ValueError, match="outcome"):
        store.outbox.acknowledge(notice.id, T0, "lost")
