"""``claim(kind, …)``, the claim that says why not, on every implementation of the port
(memory, the tests' own backend, SQLite, PostgreSQL): a step refused only for not being
due yet comes back with its ``due_at`` (what a worker needs to wait out an early hint,
``tasks/early.py``); every other refusal with none; the guard, the ``noop`` event and
the claim itself exactly as ``claim_execution`` / ``claim_verification`` have them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.recovery.contract_support import (
    REF,
    S,
    after,
    claimed,
    last,
    submit,
    verifying,
)
from tests.support.recovery.store_support import (
    LEASE,
    T0,
    needs_approval,
    retry_later,
    success,
)
from toolsafe.recovery.reasons import NOOP_NOT_DUE
from toolsafe.recovery.records import ClaimKind
from toolsafe.recovery.store import Claim, Refused, StorePort

MS = timedelta(milliseconds=1)


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


def test_a_pending_step_not_due_yet_is_refused_with_its_due_time(store: StorePort) -> None:
    due = T0 + 3 * MS  # an ETA hint 3 ms early
    submit(store, now=due)
    before = store.get(REF)
    assert store.claim("execute", REF, "worker-1", LEASE, T0) == Refused(NOOP_NOT_DUE, due)
    # The refusal is what it always was: a noop event, and nothing else changed (R6).
    assert last(store)[0] == "noop"
    assert last(store)[3] == {"claim": "execute", "reason": NOOP_NOT_DUE}
    assert store.get(REF) == before
    # Claimed at its due time, not a microsecond before.
    early = store.claim("execute", REF, "worker-1", LEASE, due - timedelta(microseconds=1))
    assert early == Refused(NOOP_NOT_DUE, due)
    claim = store.claim("execute", REF, "worker-1", LEASE, due)
    assert isinstance(claim, Claim) and claim.kind == "execute"
    assert (claim.step.state, claim.step.last_sent_at, claim.step.attempts) == (
        S.IN_FLIGHT,
        due,
        1,
    )


def test_a_retry_not_due_yet_is_refused_with_its_due_time(store: StorePort) -> None:
    after(store, lambda ref: retry_later(ref, T0 + timedelta(seconds=2)))
    step = store.get(REF)
    assert step.state is S.WAITING_RETRY and step.due_at is not None
    refused = store.claim("execute", REF, "worker-2", LEASE, step.due_at - 2 * MS)
    assert refused == Refused(NOOP_NOT_DUE, step.due_at)
    # The port's older face gives the same refusal as None, with the same event.
    assert store.claim_execution(REF, "worker-2", LEASE, step.due_at - MS) is None
    reasons = [event.detail["reason"] for event in store.events(REF) if event.kind == "noop"]
    assert reasons == [NOOP_NOT_DUE, NOOP_NOT_DUE]
    claim = store.claim("execute", REF, "worker-2", LEASE, step.due_at)
    assert isinstance(claim, Claim) and claim.step.attempts == 2


def test_a_verification_not_due_yet_is_refused_with_its_due_time(store: StorePort) -> None:
    due = verifying(store)
    assert store.claim("verify", REF, "checker", LEASE, due - MS) == Refused(NOOP_NOT_DUE, due)
    assert last(store)[3] == {"claim": "verify", "reason": NOOP_NOT_DUE}
    claim = store.claim("verify", REF, "checker", LEASE, due)
    assert isinstance(claim, Claim) and claim.kind == "verify"
    # Its lease is live: another checker is refused as "claimed", with no due time.
    assert store.claim("verify", REF, "other", LEASE, due) == Refused("claimed")


def test_every_other_refusal_carries_no_due_time(store: StorePort) -> None:
    claimed(store, "busy")
    after(store, success, "done")
    after(store, needs_approval, "human")
    submit(store, "pending", now=T0 + MS)
    cases: list[tuple[ClaimKind, str, str]] = [
        ("execute", "busy", "claimed"),
        ("execute", "done", "terminal"),
        ("execute", "human", "waiting_on_human"),
        ("execute", "ghost", "missing"),
        # Due in a millisecond, but a pending step has nothing to verify, then or ever.
        ("verify", "pending", NOOP_NOT_DUE),
    ]
    for kind, ref, reason in cases:
        assert store.claim(kind, ref, "other", LEASE, T0) == Refused(reason), (kind, ref)
        assert last(store, ref)[3] == {"claim": kind, "reason": reason}
