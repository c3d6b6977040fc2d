"""Events without envelope copies, on every implementation of the port: an event whose
envelope its step holds names it there, a change that replaces an envelope keeps the
one it replaced, and ``events`` gives back every envelope as it was recorded (the
status page, the counts and ``toolsafe steps show`` read them as before)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.recovery.contract_support import REF, S, claimed, rng, submit
from tests.support.recovery.store_support import LEASE, POLICY, T0, WRITE, success
from toolsafe.adapters.envelope import to_wire
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.schema import step_events
from toolsafe.recovery.store import StorePort
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.shared import REPLACED_ENVELOPE
from toolsafe.recovery.store.sql import StepStore
from toolsafe.testing.envelopes import retry_later, unknown


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


def _stored_details(store: StorePort, ref: str = REF) -> list[dict[str, Any]]:
    """The event details as the implementation keeps them (not as ``events`` reads them)."""
    if isinstance(store, StepStore):
        query = select(step_events.c.detail).where(step_events.c.operation_ref == ref)
        with store.engine.connect() as conn:
            return [dict(row[0]) for row in conn.execute(query.order_by(step_events.c.id))]
    assert isinstance(store, MemoryStore)
    return [dict(event.detail) for event in store._tables.events_by_ref[ref]]


def _executed(store: StorePort, ref: str = REF) -> list[dict[str, Any]]:
    return [event.detail for event in store.events(ref) if event.kind == "executed"]


def test_a_step_that_succeeds_at_once_keeps_one_copy_of_its_envelope(store: StorePort) -> None:
    claim = claimed(store)
    envelope = success(REF)
    recorded = store.record(
        claim, Executed(envelope), traits=WRITE, policy=POLICY, now=T0, rng=rng()
    )
    assert recorded is not None
    kept = _stored_details(store)[-1]
    # The event names the step's envelope and keeps what the counts read of it.
    assert kept["envelope"] == {"in_step": True, "commit_state": "committed"}
    assert REPLACED_ENVELOPE not in kept
    assert store.get(REF).last_envelope == to_wire(envelope)
    assert _executed(store) == [{**kept, "envelope": to_wire(envelope)}]


def test_every_attempt_reads_back_its_own_envelope(store: StorePort) -> None:
    """Two rate limits with different not_before, then a success: three envelopes, each
    event shows its own, though the step holds only the last."""
    claim = claimed(store)
    sent = []
    now = T0
    for seconds, remaining in ((5, 2), (9, 1)):
        due = now + timedelta(seconds=seconds)
        envelope = retry_later(REF, due, remaining=remaining)
        sent.append(to_wire(envelope))
        store.record(claim, Executed(envelope), traits=WRITE, policy=POLICY, now=now, rng=rng())
        now = due + timedelta(seconds=1)
        again = store.claim_execution(REF, "worker-2", LEASE, now)
        assert again is not None
        claim = again
    final = success(REF, "inv_9")
    sent.append(to_wire(final))
    store.record(claim, Executed(final), traits=WRITE, policy=POLICY, now=now, rng=rng())

    assert [detail["envelope"] for detail in _executed(store)] == sent
    assert all(REPLACED_ENVELOPE not in event.detail for event in store.events(REF))
    kept = [detail for detail in _stored_details(store) if "envelope" in detail]
    assert [detail["envelope"].get("in_step") for detail in kept] == [True, True, True]
    # Each later record kept the envelope it replaced, once.
    assert [detail.get(REPLACED_ENVELOPE) for detail in kept] == [None, sent[0], sent[1]]
    # What the counts read of each event, straight from the rows.
    # (in any order: the counts replay them by time and id, so sort them here too.)
    summaries = sorted(store.count_sources().events, key=lambda e: e.id)
    executed = [e for e in summaries if e.kind == "executed" and e.operation_ref == REF]
    assert [e.detail.get("commit_state") for e in executed] == [
        "not_committed",
        "not_committed",
        "committed",
    ]


def test_a_change_without_an_outcome_keeps_the_envelope_it_replaced(store: StorePort) -> None:
    """A cancellation writes the runtime's own envelope: the rate limit it replaced
    stays readable in the ``executed`` event that recorded it."""
    claim = claimed(store)
    limited = retry_later(REF, T0 + timedelta(minutes=5), remaining=2)
    store.record(claim, Executed(limited), traits=WRITE, policy=POLICY, now=T0, rng=rng())
    store.cancel(REF, by="operator", reason="not needed", traits=WRITE, policy=POLICY, now=T0)
    step = store.get(REF)
    assert step.state is S.CANCELLED and step.last_envelope != to_wire(limited)
    assert _executed(store) == [
        {**_stored_details(store)[2], "envelope": to_wire(limited)},
    ]
    assert _stored_details(store)[-1][REPLACED_ENVELOPE] == to_wire(limited)


def test_an_expired_lease_after_an_attempt_keeps_the_attempts_envelope(store: StorePort) -> None:
    claim = claimed(store)
    limited = retry_later(REF, T0 + timedelta(seconds=5), remaining=2)
    store.record(claim, Executed(limited), traits=WRITE, policy=POLICY, now=T0, rng=rng())
    later = T0 + timedelta(seconds=6)
    assert store.claim_execution(REF, "worker-2", LEASE, later) is not None
    expired = store.expire_leases(later + LEASE, lambda _: WRITE, lambda _: POLICY, rng=rng())
    assert [found.step.state for found in expired] == [S.VERIFYING]
    assert [detail["envelope"] for detail in _executed(store)] == [to_wire(limited)]


def test_an_unknown_outcome_keeps_its_own_envelope(store: StorePort) -> None:
    """The step holds the runtime's verification envelope, not the adapter's: the event
    keeps the adapter's copy, as before."""
    submit(store, "other")
    claim = store.claim_execution("other", "worker-1", LEASE, T0)
    assert claim is not None
    envelope = unknown("other")
    store.record(claim, Executed(envelope), traits=WRITE, policy=POLICY, now=T0, rng=rng())
    if store.get("other").last_envelope != to_wire(envelope):
        assert _stored_details(store, "other")[-1]["envelope"] == to_wire(envelope)
    assert _executed(store, "other") == [
        {**_stored_details(store, "other")[-1], "envelope": to_wire(envelope)}
    ]
