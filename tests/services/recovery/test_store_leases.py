"""The store's lease statements: a heartbeat's renewal (a CAS on state, version and owner),
a dead owner's step through the expired lease's transition (R4), and one process's leases;
and the decision that never resends a write while the first call may still be running."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import event

from tests.services.recovery.test_store_contract import store as store_of_each_kind
from tests.support.recovery.store_support import LEASE, POLICY, T0, WRITE, create_step, success
from toolsafe.adapters.protocol import LookupNotFound
from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import Executed, LookedUp, StepSnapshot
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

# Every implementation of the port: memory, SQLite and PostgreSQL (the contract suite's).
store = store_of_each_kind

S = StepState
OWNER = "host-a:41:9001:boot.1"
OTHER = "host-a:42:9002:boot.1"
SECOND = timedelta(seconds=1)


def _in_flight(store: StepStore, ref: str, owner: str = OWNER) -> None:
    create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    assert store.claim_execution(ref, owner, LEASE, T0) is not None


def test_a_renewal_extends_the_lease_and_moves_the_version(store: StepStore) -> None:
    create_step(store, "create_invoice", {"r": 1}, operation_ref="r1", policy=POLICY, now=T0)
    claim = store.claim_execution("r1", OWNER, LEASE, T0)
    assert claim is not None
    renewed = store.renew_lease(claim.step, OWNER, LEASE, T0 + 10 * SECOND)
    assert renewed is not None
    assert renewed.lease_expires_at == T0 + 10 * SECOND + LEASE
    assert renewed.version == claim.step.version + 1 and renewed.state is S.IN_FLIGHT
    # The old version no longer renews: whoever read the row before lost.
    assert store.renew_lease(claim.step, OWNER, LEASE, T0 + 11 * SECOND) is None
    # A heartbeat writes no event: it changes no state.
    assert [event.kind for event in store.events("r1")] == ["submitted", "claimed"]
    # The sweeper sees the renewed expiry, not the first one.
    assert store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY) == []
    # The call records under the renewed claim.
    held = replace(claim, step=renewed)
    recorded = store.record(
        held,
        Executed(success("r1")),
        traits=WRITE,
        policy=POLICY,
        now=T0 + 12 * SECOND,
        rng=random.Random(1),
    )
    assert recorded is not None and recorded.step.state is S.SUCCEEDED


def test_a_lease_taken_over_is_never_renewed(store: StepStore) -> None:
    create_step(store, "create_invoice", {"r": 2}, operation_ref="r2", policy=POLICY, now=T0)
    claim = store.claim_execution("r2", OWNER, LEASE, T0)
    assert claim is not None
    [expired] = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert expired.step.state is S.VERIFYING
    assert store.renew_lease(claim.step, OWNER, LEASE, T0 + LEASE) is None
    # Another owner's name never renews someone's lease either.
    _in_flight(store, "r3")
    held = store.get("r3")
    assert store.renew_lease(held, OTHER, LEASE, T0 + SECOND) is None


def test_a_dead_owners_step_goes_to_verification_at_once(store: StepStore) -> None:
    _in_flight(store, "r4")
    # Long before the lease runs out, through the expired lease's own transition (R4).
    recorded = store.expire_lease_of_dead_owner(
        "r4", OWNER, T0 + SECOND, lambda _: WRITE, lambda _: POLICY
    )
    assert recorded is not None
    step = recorded.step
    assert (step.state, step.commit_state, step.lease_owner) == (S.VERIFYING, "unknown", None)
    assert recorded.decision.action == "verify"
    event = store.events("r4")[-1]
    assert (event.kind, event.from_state, event.to_state) == (
        "lease_expired",
        S.IN_FLIGHT,
        S.VERIFYING,
    )
    assert event.detail["owner"] == OWNER and event.detail["owner_gone"] is True
    # Never back to execution; a second report of the same death changes nothing.
    assert store.claim_execution("r4", OTHER, LEASE, T0 + 2 * SECOND) is None
    assert (
        store.expire_lease_of_dead_owner(
            "r4", OWNER, T0 + 2 * SECOND, lambda _: WRITE, lambda _: POLICY
        )
        is None
    )


def test_only_the_named_owner_loses_its_lease(store: StepStore) -> None:
    _in_flight(store, "r5")
    assert (
        store.expire_lease_of_dead_owner(
            "r5", OTHER, T0 + SECOND, lambda _: WRITE, lambda _: POLICY
        )
        is None
    )
    assert store.get("r5").state is S.IN_FLIGHT
    assert (
        store.expire_lease_of_dead_owner("nope", OWNER, T0, lambda _: WRITE, lambda _: POLICY)
        is None
    )


def test_a_dead_verifier_leaves_its_step_due_for_another_look(store: StepStore) -> None:
    _in_flight(store, "r6")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    later = T0 + LEASE + timedelta(minutes=1)
    assert store.claim_verification("r6", OTHER, LEASE, later) is not None
    recorded = store.expire_lease_of_dead_owner(
        "r6", OTHER, later + SECOND, lambda _: WRITE, lambda _: POLICY
    )
    assert recorded is not None
    assert recorded.step.state is S.VERIFYING and recorded.step.lease_owner is None
    assert recorded.step.due_at == later + SECOND


def test_the_leases_of_one_process(store: StepStore) -> None:
    _in_flight(store, "r7")
    _in_flight(store, "r8", owner=OTHER)
    _in_flight(store, "r9", owner="host_a:41:1:boot.1")  # "_" is a LIKE wildcard
    held = store.leases_held_by("host-a:41:")
    assert [step.operation_ref for step in held] == ["r7"]
    assert store.leases_held_by("host-b:41:") == []


def _snapshot(store: StepStore, ref: str, longest_call: timedelta) -> StepSnapshot:
    from toolsafe.recovery.rows import snapshot

    return snapshot(store.get(ref), replace(WRITE, longest_call=longest_call))


def test_not_found_is_final_only_once_the_first_call_cannot_be_running(
    store: StepStore,
) -> None:
    """A paused process may still send its write until its time limit since the claim:
    "not found" before then (plus the consistency window) is looked at again."""
    _in_flight(store, "r10")
    store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    limit = timedelta(minutes=2)
    step = _snapshot(store, "r10", limit)
    window_end = T0 + limit + WRITE.consistency_window
    absent = LookedUp(LookupNotFound(checked_at=T0))
    rng = random.Random(3)
    early = decide(step, absent, T0 + LEASE + SECOND, POLICY, rng)
    assert early.state is S.VERIFYING and early.action == "verify"
    assert early.due_at is not None and early.due_at <= window_end
    moment = window_end - timedelta(microseconds=1)
    just_before = decide(step, absent, moment, POLICY, rng)
    # The next look is at the moment "not found" becomes final, not a backoff later.
    assert just_before.state is S.VERIFYING and just_before.due_at == window_end
    final = decide(step, absent, window_end, POLICY, rng)
    assert (final.state, final.action, final.commit_state) == (
        S.WAITING_RETRY,
        "run",
        "not_committed",
    )
    # Without a time limit to wait for, only the consistency window counts (as before).
    plain = _snapshot(store, "r10", timedelta(0))
    assert decide(plain, absent, T0 + WRITE.consistency_window, POLICY, rng).state is (
        S.WAITING_RETRY
    )


def test_a_renewal_never_leaves_the_row_locked_between_round_trips(pg_store: StepStore) -> None:
    """A heartbeat's UPDATE is committed by the statement itself: were the worker cut off
    or stopped right after it, no transaction would be left open on the server holding
    the step's row, which the sweeper (``FOR UPDATE SKIP LOCKED``) would pass over until
    the server noticed the connection was dead."""
    _in_flight(pg_store, "locked")
    claimed = pg_store.get("locked")
    left: list[str] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        status = conn.connection.dbapi_connection.info.transaction_status
        left.append(f"{status.name}: {statement.split()[0]}")

    event.listen(pg_store.engine, "after_cursor_execute", after)
    try:
        renewed = pg_store.renew_lease(claimed, OWNER, LEASE, T0 + SECOND)
    finally:
        event.remove(pg_store.engine, "after_cursor_execute", after)
    assert renewed is not None and renewed.lease_expires_at == T0 + SECOND + LEASE
    assert left and all(entry.startswith("IDLE:") for entry in left), left
