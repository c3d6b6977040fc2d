"""The article's counts on a scripted history whose every figure was worked out by hand."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.recovery.store_support import create_step
from toolsafe.recovery.counts import (
    Counts,
    as_json,
    compute_counts,
    percentile,
    render,
)
from toolsafe.recovery.records import EventRecord
from toolsafe.recovery.states import StepState

S = StepState
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Step:
    operation_ref: str
    state: StepState
    reason: str | None = None


class History:
    """Builds EventRecords in the order they happened (ids ascend like the table's)."""

    def __init__(self) -> None:
        self.events: list[EventRecord] = []

    def add(
        self,
        ref: str,
        second: float,
        kind: str,
        src: StepState | None,
        dst: StepState | None,
        **detail: Any,
    ) -> None:
        self.events.append(
            EventRecord(
                id=len(self.events) + 1,
                operation_ref=ref,
                at=T0 + timedelta(seconds=second),
                kind=kind,
                from_state=src,
                to_state=dst,
                label="",
                detail=detail,
            )
        )

    def run(self, ref: str, start: float, end: float, kind: str, dst: StepState, **d: Any) -> None:
        """A claim at ``start`` and the execution's outcome at ``end``."""
        self.add(ref, start, "claimed", S.PENDING, S.IN_FLIGHT)
        self.add(ref, end, kind, S.IN_FLIGHT, dst, **d)


def unknown(**extra: Any) -> dict[str, Any]:
    return {"envelope": {"ok": False, "commit_state": "unknown", **extra}}


def scripted() -> tuple[list[Step], list[EventRecord]]:
    h = History()
    for ref in "ABCDEFGHIJ":
        h.add(ref, 0, "submitted", None, S.PENDING)
    # A: clean success.
    h.run("A", 1, 2, "executed", S.SUCCEEDED)
    # B: stall after store → unknown → a duplicate delivery refused → found committed.
    h.run("B", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("B", 3, "noop", S.VERIFYING, S.VERIFYING, claim="execute", reason="unknown_outcome")
    h.add("B", 3.5, "claimed", S.VERIFYING, S.VERIFYING, claim="verify")
    # A second verification hint while the first holds the lease: nothing to do.
    h.add("B", 3.6, "noop", S.VERIFYING, S.VERIFYING, claim="verify", reason="claimed")
    h.add("B", 4, "looked_up", S.VERIFYING, S.VERIFYING, result="not_found")
    h.add("B", 10, "looked_up", S.VERIFYING, S.SUCCEEDED, result="found")
    # C: a second worker finds it claimed; the first dies; verification finds nothing
    # after the window; executed again under the same operation_ref.
    h.run("C", 1, 5, "lease_expired", S.VERIFYING)
    h.add("C", 1.5, "noop", None, None, reason="claimed")
    h.add("C", 8, "looked_up", S.VERIFYING, S.WAITING_RETRY, result="not_found")
    h.add("C", 9, "claimed", S.WAITING_RETRY, S.IN_FLIGHT)
    h.add("C", 10, "executed", S.IN_FLIGHT, S.SUCCEEDED)
    # D: lookup down for too long → escalated.
    h.run("D", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("D", 5, "looked_up", S.VERIFYING, S.VERIFYING, result="unavailable")
    h.add("D", 9, "looked_up", S.VERIFYING, S.VERIFYING, result="unavailable")
    h.add("D", 20, "looked_up", S.VERIFYING, S.ESCALATED, reason="LOOKUP_UNAVAILABLE")
    # E: version conflict, escalated at once; a late redelivery finds it terminal.
    h.run("E", 1, 2, "executed", S.ESCALATED, envelope={"commit_state": "not_committed"})
    h.add("E", 3, "noop", None, None, reason="terminal")
    # F: invalid recipient → a redelivery while waiting on the agent → corrected input.
    h.run("F", 1, 2, "executed", S.NEEDS_INPUT)
    h.add("F", 5, "noop", None, None, reason="waiting_on_human")
    h.add("F", 30, "input_provided", S.NEEDS_INPUT, S.PENDING)
    h.run("F", 31, 32, "executed", S.SUCCEEDED)
    # G: rate limited; a message that arrives before not_before does nothing.
    h.run("G", 1, 2, "executed", S.WAITING_RETRY)
    h.add("G", 2.5, "noop", None, None, reason="not_due")
    h.add("G", 4, "claimed", S.WAITING_RETRY, S.IN_FLIGHT)
    h.add("G", 5, "executed", S.IN_FLIGHT, S.SUCCEEDED)
    # H: unknown outcome of a tool without lookup → escalated at once, never retried.
    h.run("H", 1, 2, "executed", S.ESCALATED, reason="UNVERIFIABLE_UNKNOWN", **unknown())
    # I: the worker died; still verifying when the counts are taken.
    h.run("I", 1, 3, "lease_expired", S.VERIFYING)
    # J: cancelled while verifying.
    h.run("J", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("J", 4, "cancelled", S.VERIFYING, S.CANCELLED, by="agent")
    # A message for an operation_ref that has no step.
    h.add("ghost", 7, "noop", None, None, reason="missing")
    steps = [
        Step("A", S.SUCCEEDED),
        Step("B", S.SUCCEEDED),
        Step("C", S.SUCCEEDED),
        Step("D", S.ESCALATED, "LOOKUP_UNAVAILABLE"),
        Step("E", S.ESCALATED, "VERSION_CONFLICT"),
        Step("F", S.SUCCEEDED),
        Step("G", S.SUCCEEDED),
        Step("H", S.ESCALATED, "UNVERIFIABLE_UNKNOWN"),
        Step("I", S.VERIFYING),
        Step("J", S.CANCELLED, "CANCELLED"),
    ]
    return steps, h.events


def check_hand_counts(counts: Counts) -> None:
    assert counts.steps == 10
    assert counts.by_state == {"cancelled": 1, "escalated": 3, "succeeded": 5, "verifying": 1}
    v = counts.verification
    # B committed; C absent; D and H escalated; J cancelled; I open.
    assert (v.committed, v.absent, v.escalated, v.cancelled, v.open) == (1, 1, 2, 1, 1)
    assert v.unknown_outcomes == 6
    assert v.resolved == 4
    p = counts.prevented
    assert p.refused == {"claimed": 1, "terminal": 1, "unknown_outcome": 1}
    assert p.idle_redeliveries == {
        "execute:missing": 1,
        "execute:not_due": 1,
        "execute:waiting_on_human": 1,
        "verify:claimed": 1,
    }
    assert p.found_committed == 1
    assert p.total == 8
    # Waits: B 10-2, C 10-5, D 20-2, F 32-2, G 5-2, J 4-2; E and H failed straight to a
    # terminal state (nothing to wait for), A never failed, I is not terminal.
    w = counts.recovery_wait
    assert w.count == 6
    assert w.total == pytest.approx(66.0)
    assert w.quantiles == {0.5: 5.0, 0.95: 30.0, 0.99: 30.0}
    assert w.max == 30.0
    assert counts.escalations_by_reason == {
        "LOOKUP_UNAVAILABLE": 1,
        "UNVERIFIABLE_UNKNOWN": 1,
        "VERSION_CONFLICT": 1,
    }
    # C, F and G were executed twice; everyone else once.
    assert counts.attempts == {1: 7, 2: 3}
    assert counts.attempts_total == 13


def test_scripted_history_gives_the_hand_counts() -> None:
    steps, events = scripted()
    check_hand_counts(compute_counts(steps, events))


def test_event_order_does_not_matter() -> None:
    steps, events = scripted()
    shuffled = list(events)
    random.Random(6).shuffle(shuffled)
    check_hand_counts(compute_counts(steps, shuffled))


def test_store_records_fit_the_protocols() -> None:
    steps, events = scripted()
    counts = compute_counts(steps[:1], [e for e in events if e.operation_ref == "A"])
    assert counts.attempts == {1: 1}
    assert counts.recovery_wait.count == 0
    assert counts.recovery_wait.quantiles == {}


def test_nothing_at_all() -> None:
    counts = compute_counts([], [])
    assert counts.steps == 0
    assert counts.prevented.total == 0
    assert counts.verification.unknown_outcomes == 0
    assert counts.attempts == {}
    assert "recovery wait (first failure → terminal, 0 steps): p50 -" in render(counts)


def test_a_step_that_was_never_claimed_has_zero_attempts() -> None:
    h = History()
    h.add("X", 0, "submitted", None, S.PENDING)
    h.add("X", 1, "cancelled", S.PENDING, S.CANCELLED)
    counts = compute_counts([Step("X", S.CANCELLED, "CANCELLED")], h.events)
    assert counts.attempts == {0: 1}
    assert counts.recovery_wait.count == 0


def test_each_verification_round_counts_once() -> None:
    h = History()
    h.run("Y", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("Y", 3, "looked_up", S.VERIFYING, S.WAITING_RETRY)
    h.add("Y", 4, "claimed", S.WAITING_RETRY, S.IN_FLIGHT)
    h.add("Y", 5, "lease_expired", S.IN_FLIGHT, S.VERIFYING)
    h.add("Y", 6, "lease_expired", S.VERIFYING, S.VERIFYING)  # verification lease released
    h.add("Y", 7, "looked_up", S.VERIFYING, S.SUCCEEDED)
    counts = compute_counts([Step("Y", S.SUCCEEDED)], h.events)
    v = counts.verification
    assert (v.committed, v.absent, v.unknown_outcomes) == (1, 1, 2)
    assert counts.attempts == {2: 1}
    assert counts.recovery_wait.quantiles[0.5] == 5.0


def test_an_operator_resolution_after_escalation_keeps_the_first_terminal_time() -> None:
    h = History()
    h.run("Z", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("Z", 4, "looked_up", S.VERIFYING, S.ESCALATED)
    h.add("Z", 100, "resolved", S.ESCALATED, S.SUCCEEDED, operator="ops")
    counts = compute_counts([Step("Z", S.SUCCEEDED, "OPERATOR_RESOLVED")], h.events)
    assert counts.recovery_wait.quantiles[0.99] == 2.0
    assert counts.escalations_by_reason == {}  # no longer escalated
    assert counts.verification.escalated == 1


def test_a_verification_round_cannot_end_in_a_state_off_the_table() -> None:
    h = History()
    h.run("W", 1, 2, "executed", S.VERIFYING, **unknown())
    h.add("W", 3, "looked_up", S.VERIFYING, S.NEEDS_INPUT)
    with pytest.raises(ValueError, match="not a lifecycle edge"):
        compute_counts([Step("W", S.NEEDS_INPUT)], h.events)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 0.5, 1.0),
        ([1.0, 2.0], 0.5, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
        ([float(i) for i in range(1, 101)], 0.95, 95.0),
        ([float(i) for i in range(1, 101)], 0.99, 99.0),
        ([float(i) for i in range(1, 11)], 0.99, 10.0),
    ],
)
def test_nearest_rank_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 0.0)


def test_render_and_json_carry_the_same_figures() -> None:
    steps, events = scripted()
    counts = compute_counts(steps, events)
    text = render(counts)
    assert "resolved by verification: 4 (found committed 1, found absent 1, escalated 2)" in text
    assert "duplicate writes prevented: 8" in text
    assert "p50 5.000s, p95 30.000s, p99 30.000s" in text
    assert "LOOKUP_UNAVAILABLE 1, UNVERIFIABLE_UNKNOWN 1, VERSION_CONFLICT 1" in text
    assert "attempts per step: 1×7, 2×3 (total 13)" in text
    data = json.loads(json.dumps(as_json(counts)))
    assert data["unknown_outcomes"]["found_committed"] == 1
    assert data["duplicate_writes_prevented"]["total"] == 8
    assert data["recovery_wait_seconds"]["p95"] == 30.0
    assert data["attempts_per_step"] == {"1": 7, "2": 3}


# ------------------------------------------------------------ the same counts, real store


def _envelope_error(ref: str, **fields: Any) -> Any:
    from toolsafe.adapters.envelope import Retry, ToolError

    directive = fields.pop("directive", "never")
    return ToolError(
        retry=Retry(directive=directive, max_attempts_remaining=fields.pop("remaining", 0)),
        operation_ref=ref,
        agent_message="Scripted.",
        user_message="Scripted.",
        **fields,
    )


def _success(ref: str, at: datetime) -> Any:
    from toolsafe.adapters.envelope import ToolSuccess, Verification

    return ToolSuccess[Any](
        operation_ref=ref, result={"id": ref}, verification=Verification(checked_at=at)
    )


def drive_store(url: str) -> Any:
    """Four steps through the real store, at clock values chosen by hand (seconds):

    A succeeds. B's write is unknown at 2, a duplicate execution is refused, the
    verification at 12 finds it (wait 10). C's worker vanishes after its claim while a
    second claim is refused; the lease expires at 6, verification finds nothing after
    the window, the retry succeeds at 20 (wait 14). E hits a version conflict and is
    escalated; a late hint finds it terminal.
    """
    from toolsafe.adapters.protocol import LookupFound, LookupNotFound
    from toolsafe.recovery.db import make_engine, migrate
    from toolsafe.recovery.outcomes import Executed, LookedUp
    from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits
    from toolsafe.recovery.store.sql import StepStore

    migrate(url)
    store = StepStore(make_engine(url))
    traits = ToolTraits(writes=True, has_lookup=True, consistency_window=timedelta(0))
    policy = Policy(retry=RetryPolicy(base_delay=timedelta(0), max_delay=timedelta(0)))
    lease = timedelta(seconds=5)
    rng = random.Random(1)

    def at(second: float) -> datetime:
        return T0 + timedelta(seconds=second)

    def record(claim: Any, outcome: Any, second: float) -> Any:
        done = store.record(claim, outcome, traits=traits, policy=policy, now=at(second), rng=rng)
        assert done is not None
        return done.step

    for ref in ("A", "B", "C", "E"):
        create_step(
            store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=policy, now=at(0)
        )
    # A: clean success.
    claim = store.claim_execution("A", "w1", lease, at(1))
    assert record(claim, Executed(_success("A", at(2))), 2).state is S.SUCCEEDED
    # B: unknown → a duplicate execution refused → verification finds the write.
    claim = store.claim_execution("B", "w1", lease, at(1))
    unknown_error = _envelope_error(
        "B",
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        next_action="verify_operation",
    )
    assert record(claim, Executed(unknown_error), 2).state is S.VERIFYING
    assert store.claim_execution("B", "w2", lease, at(3)) is None
    verify = store.claim_verification("B", "w2", lease, at(12))
    assert verify is not None
    found = LookedUp(LookupFound(checked_at=at(12), result={"id": "B"}, evidence_ref="inv/B"))
    assert record(verify, found, 12).state is S.SUCCEEDED
    # C: claimed, a second claim refused, the lease expires at 6 → verifying; not found
    # after the window → waiting_retry; executed again and succeeds at 20.
    assert store.claim_execution("C", "w1", lease, at(1)) is not None
    assert store.claim_execution("C", "w2", lease, at(2)) is None
    expired = store.expire_leases(at(6), lambda _: traits, lambda _: policy)
    assert [r.step.operation_ref for r in expired] == ["C"]
    verify = store.claim_verification("C", "w2", lease, at(8))
    assert verify is not None
    assert record(verify, LookedUp(LookupNotFound(checked_at=at(8))), 8).state is S.WAITING_RETRY
    claim = store.claim_execution("C", "w2", lease, at(19))
    assert claim is not None
    assert record(claim, Executed(_success("C", at(20))), 20).state is S.SUCCEEDED
    # E: conflict → escalated with the envelope's code; a late hint finds it terminal.
    claim = store.claim_execution("E", "w1", lease, at(1))
    conflict = _envelope_error(
        "E", code="VERSION_CONFLICT", category="conflict", commit_state="not_committed",
        next_action="escalate",
    )  # fmt: skip
    assert record(claim, Executed(conflict), 2).state is S.ESCALATED
    assert store.claim_execution("E", "w1", lease, at(3)) is None
    return store


def check_store_counts(counts: Counts) -> None:
    assert counts.by_state == {"escalated": 1, "succeeded": 3}
    v = counts.verification
    assert (v.committed, v.absent, v.escalated, v.open) == (1, 1, 0, 0)
    assert counts.prevented.refused == {"claimed": 1, "terminal": 1, "unknown_outcome": 1}
    assert counts.prevented.found_committed == 1
    assert counts.prevented.total == 4
    # B: 12 - 2; C: 20 - 6. E failed straight to a terminal state.
    assert counts.recovery_wait.count == 2
    assert counts.recovery_wait.quantiles == {0.5: 10.0, 0.95: 14.0, 0.99: 14.0}
    assert counts.escalations_by_reason == {"VERSION_CONFLICT": 1}
    assert counts.attempts == {1: 3, 2: 1}


def counts_of(store: Any) -> Counts:
    found = store.list_steps(limit=1000)
    events = [event for step in found for event in store.events(step.operation_ref)]
    return compute_counts(found, events)


def test_counts_over_a_real_sqlite_store(tmp_path: Any) -> None:
    store = drive_store(f"sqlite:///{tmp_path / 'counts.db'}")
    check_store_counts(counts_of(store))


@pytest.mark.postgres
def test_counts_over_a_real_postgresql_store(pg_url: str) -> None:
    import uuid

    import psycopg

    # A database of its own: the session database is shared with other tests.
    name = f"counts_{uuid.uuid4().hex[:8]}"
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        store = drive_store(url)
        check_store_counts(counts_of(store))
        store.engine.dispose()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
