"""The store port's contract, run against every implementation: the in-memory store,
SQLite and PostgreSQL. The same functions, the same answers: guarded transitions, zero
rows as an answer, versions, leases, due times, one event per change (R2-R10). The
sweeper's side is in test_store_contract_sweeper.py, the agents' and operators' actions
in test_store_contract_actions.py; the helpers in tests/support/recovery/contract_support.py."""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.exc import StatementError

from tests.support.recovery.contract_support import (
    LATER,
    MINUTE,
    REF,
    S,
    after,
    claimed,
    last,
    rng,
    set_columns,
    submit,
    verifying,
)
from tests.support.recovery.journal_store import JournalStore
from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    escalate,
    needs_approval,
    retry_later,
    success,
    unknown,
)
from toolsafe.adapters.envelope import to_wire
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.recovery.counts import compute_counts
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import (
    Claim,
    InvalidOperationRef,
    OperationRefConflict,
    StepNotFound,
    StorePort,
)
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.sql import StepStore


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


PORT_METHODS = sorted(
    name for name, value in vars(StorePort).items() if callable(value) and not name.startswith("_")
)


@pytest.mark.parametrize("implementation", [StepStore, MemoryStore, JournalStore])
def test_every_implementation_has_the_ports_signatures(implementation: type[Any]) -> None:
    # mypy checks the fixture's annotation; this also holds parameter names and defaults.
    assert len(PORT_METHODS) == 27
    for name in PORT_METHODS:
        port = inspect.signature(getattr(StorePort, name))
        found = inspect.signature(getattr(implementation, name))
        assert [(p.name, p.kind, p.default) for p in found.parameters.values()] == [
            (p.name, p.kind, p.default) for p in port.parameters.values()
        ], name


# ------------------------------------------------------------------ submit and reads


def test_submit_commits_a_pending_step_and_its_event(store: StorePort) -> None:
    done = store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    step, event = done.step, done.event
    assert done.created and event is not None
    assert (step.state, step.due_at, step.attempts, step.max_attempts) == (S.PENDING, T0, 0, 3)
    assert step.input == INPUT and step.input_hash.startswith("sha256:")
    assert (step.version, step.commit_state, step.lease_owner, step.published_at) == (
        1,
        None,
        None,
        None,
    )
    assert store.get(REF) == step and store.events(REF) == [event]
    assert (event.kind, event.from_state, event.to_state, event.label, event.at) == (
        "submitted",
        None,
        S.PENDING,
        "submitted",
        T0,
    )
    assert event.detail == {
        "tool": "create_invoice",
        "input_hash": step.input_hash,
        "max_attempts": 3,
    }


def test_submit_again_returns_the_stored_step_and_refuses_another_call(store: StorePort) -> None:
    first = store.submit("create_invoice", INPUT, operation_ref=REF, policy=POLICY, now=T0)
    reordered = dict(reversed(list(INPUT.items())))
    again = store.submit("create_invoice", reordered, operation_ref=REF, policy=POLICY, now=LATER)
    assert not again.created and again.event is None and again.step == first.step
    for tool, data, what in (
        ("create_invoice", {**INPUT, "amount": 121}, "input"),
        ("send_email", INPUT, "tool"),
    ):
        with pytest.raises(OperationRefConflict) as raised:
            store.submit(tool, data, operation_ref=REF, policy=POLICY, now=T0)
        assert raised.value.what == what and REF in str(raised.value)
    assert store.get(REF) == first.step and len(store.events(REF)) == 1


def test_submit_generates_and_checks_operation_refs(store: StorePort) -> None:
    done = store.submit("t", {}, operation_ref=None, policy=POLICY, now=T0)
    assert done.step.operation_ref.startswith("op_") and len(done.step.operation_ref) == 35
    for bad in ("has space", "", "x" * 201, "-leading"):
        with pytest.raises(InvalidOperationRef):
            store.submit("t", {}, operation_ref=bad, policy=POLICY, now=T0)
    assert [step.operation_ref for step in store.list_steps()] == [done.step.operation_ref]


def test_submit_stamps_the_publish_it_is_about_to_make(store: StorePort) -> None:
    done = store.submit("t", {}, operation_ref=REF, policy=POLICY, now=T0, published_at=T0)
    assert done.step.published_at == T0 and store.get(REF).published_at == T0


def test_times_are_aware_utc_and_naive_ones_refused(store: StorePort) -> None:
    local = T0.astimezone(ZoneInfo("Asia/Shanghai"))
    done = store.submit("t", {}, operation_ref=REF, policy=POLICY, now=local)
    stored = store.get(REF)
    assert stored == done.step and stored.due_at == T0
    assert stored.created_at.utcoffset() == timedelta(0)
    with pytest.raises((ValueError, StatementError), match="aware"):
        store.submit("t", {}, operation_ref="naive", policy=POLICY, now=datetime(2026, 1, 1))
    with pytest.raises(StepNotFound):
        store.get("naive")


def test_reads_of_a_missing_step(store: StorePort) -> None:
    with pytest.raises(StepNotFound, match="nope"):
        store.get("nope")
    assert store.events("nope") == []


def test_list_steps_by_tool_and_ref_prefix(store: StorePort) -> None:
    submit(store, "run_8/a")
    submit(store, "run_81/b")
    store.submit("send_email", INPUT, operation_ref="run_8/c", policy=POLICY, now=T0)
    store.submit("send_email", INPUT, operation_ref="runX8/d", policy=POLICY, now=T0)

    def refs(**filters: Any) -> list[str]:
        return [step.operation_ref for step in store.list_steps(**filters)]

    assert refs(prefix="run_8/") == ["run_8/c", "run_8/a"]
    assert refs(prefix="run_8") == ["run_8/c", "run_81/b", "run_8/a"]  # "_" is no wildcard
    assert refs(tool="send_email") == ["runX8/d", "run_8/c"]
    assert refs(tool="send_email", prefix="run_8/", states=[S.PENDING]) == ["run_8/c"]
    assert refs(tool="send_email", states=[S.IN_FLIGHT]) == []
    with pytest.raises(ValueError, match="limit"):
        store.list_steps(limit=-1)


def test_list_steps_newest_first_by_state_and_limit(store: StorePort) -> None:
    for index in range(3):
        submit(store, f"r{index}")
    assert store.claim_execution("r1", "w", LEASE, T0) is not None
    assert [step.operation_ref for step in store.list_steps()] == ["r2", "r1", "r0"]
    assert [step.operation_ref for step in store.list_steps([S.IN_FLIGHT])] == ["r1"]
    assert [step.operation_ref for step in store.list_steps([S.PENDING], limit=1)] == ["r2"]
    assert store.list_steps([S.SUCCEEDED]) == []


def test_step_summaries_by_prefix(store: StorePort) -> None:
    for ref in ("a_b/1", "a_b/2", "axb/3", "b/4"):
        submit(store, ref)
    after(store, escalate, "b/5")
    assert store.claim_execution("a_b/2", "w", LEASE, T0) is not None
    every = {s.operation_ref: (s.state, s.commit_state, s.reason) for s in store.step_summaries()}
    assert every == {
        "a_b/1": (S.PENDING, None, None),
        "a_b/2": (S.IN_FLIGHT, None, None),
        "axb/3": (S.PENDING, None, None),
        "b/4": (S.PENDING, None, None),
        "b/5": (S.ESCALATED, "not_committed", "VERSION_CONFLICT"),
    }
    # The prefix is literal text, not a LIKE pattern.
    assert {s.operation_ref for s in store.step_summaries("a_b")} == {"a_b/1", "a_b/2"}
    assert store.step_summaries("zzz") == []


def test_count_sources_carry_what_the_counts_read(store: StorePort) -> None:
    after(store, success, "p/ok")
    verifying(store, "p/unknown")
    assert store.claim_execution("p/unknown", "w2", LEASE, T0) is None
    assert store.claim_execution("ghost", "w2", LEASE, T0) is None
    submit(store, "q/other")
    sources = store.count_sources("p/")
    assert {step.operation_ref for step in sources.steps} == {"p/ok", "p/unknown"}
    events = {(e.operation_ref, e.kind, e.to_state): e.detail for e in sources.events}
    assert events[("p/ok", "executed", S.SUCCEEDED)] == {"commit_state": "committed"}
    assert events[("p/unknown", "noop", S.VERIFYING)] == {
        "claim": "execute",
        "reason": "unknown_outcome",
    }
    assert events[("p/ok", "claimed", S.IN_FLIGHT)] == {"claim": "execute"}
    assert len(sources.events) == sum(len(store.events(ref)) for ref in ("p/ok", "p/unknown"))
    # The counts from these sources are the counts from the full records.
    everything = store.count_sources()
    steps = store.list_steps()
    full = [
        event for ref in ("p/ok", "p/unknown", "q/other", "ghost") for event in store.events(ref)
    ]
    assert compute_counts(everything.steps, everything.events) == compute_counts(steps, full)
    assert len(everything.events) == len(full)


# ------------------------------------------------------------------ claim_execution


def test_claim_execution_takes_a_lease_and_counts_the_attempt(store: StorePort) -> None:
    claim = claimed(store)
    step = claim.step
    assert (claim.kind, claim.owner) == ("execute", "worker-1")
    assert (step.state, step.attempts, step.version) == (S.IN_FLIGHT, 1, 2)
    assert (step.lease_owner, step.lease_expires_at, step.last_sent_at) == (
        "worker-1",
        T0 + LEASE,
        T0,
    )
    assert store.get(REF) == step
    event = store.events(REF)[-1]
    assert (event.kind, event.from_state, event.to_state, event.label) == (
        "claimed",
        S.PENDING,
        S.IN_FLIGHT,
        "claimed by a worker",
    )
    assert event.detail == {
        "claim": "execute",
        "owner": "worker-1",
        "attempt": 1,
        "lease_expires_at": (T0 + LEASE).isoformat(),
    }


def test_claim_execution_from_waiting_retry_only_when_due(store: StorePort) -> None:
    claim = claimed(store)
    due = T0 + timedelta(seconds=20)
    recorded = store.record(
        claim, Executed(retry_later(REF, due)), traits=WRITE, policy=POLICY, now=T0, rng=rng()
    )
    assert recorded is not None and recorded.step.state is S.WAITING_RETRY
    assert recorded.step.due_at == due
    assert store.claim_execution(REF, "worker-2", LEASE, due - timedelta(seconds=1)) is None
    assert last(store)[3] == {"claim": "execute", "reason": "not_due"}
    second = store.claim_execution(REF, "worker-2", LEASE, due)
    assert second is not None and second.step.attempts == 2
    event = store.events(REF)[-1]
    assert (event.from_state, event.label) == (S.WAITING_RETRY, "claimed by a worker when due")


def _refused(store: StorePort, ref: str, now: datetime = T0) -> str:
    try:
        before = store.get(ref)
    except StepNotFound:
        before = None
    assert store.claim_execution(ref, "other", LEASE, now) is None
    kind, src, dst, detail = last(store, ref)
    assert kind == "noop" and src == dst and detail["claim"] == "execute"
    assert src is (None if before is None else before.state)
    if before is not None:
        assert store.get(ref) == before  # a refusal changes nothing but the log
    reason: str = detail["reason"]
    return reason


def test_claim_execution_refusals_are_answers_with_a_reason(store: StorePort) -> None:
    claimed(store, "busy")
    assert _refused(store, "busy") == "claimed"
    submit(store, "later", now=T0 + LEASE)
    assert _refused(store, "later") == "not_due"
    verifying(store, "unknown")
    assert _refused(store, "unknown", T0 + LEASE) == "unknown_outcome"
    submit(store, "old")
    set_columns(store, "old", commit_state="unknown")  # whatever the state says, unknown wins
    assert _refused(store, "old") == "unknown_outcome"
    submit(store, "spent")
    set_columns(store, "spent", state=S.WAITING_RETRY, attempts=3)
    assert _refused(store, "spent") == "attempts_spent"
    after(store, success, "done")
    assert _refused(store, "done") == "terminal"
    after(store, correct_input, "human")
    assert _refused(store, "human") == "waiting_on_human"
    assert _refused(store, "ghost") == "missing"
    assert store.events("ghost")[0].from_state is None
    # One refusal, one noop event: the duplicate writes prevented, counted by reason.
    refs = ("busy", "later", "unknown", "old", "spent", "done", "human", "ghost")
    noops = Counter(
        event.detail["reason"]
        for ref in refs
        for event in store.events(ref)
        if event.kind == "noop"
    )
    assert noops == {
        "not_due": 1,
        "claimed": 1,
        "unknown_outcome": 2,
        "terminal": 1,
        "waiting_on_human": 1,
        "attempts_spent": 1,
        "missing": 1,
    }


def test_a_claim_asked_again_after_it_went_through_is_still_ours(store: StorePort) -> None:
    claim = claimed(store)
    again = store.claim_execution(REF, "worker-1", LEASE, T0)
    assert again is not None and again.step == claim.step
    assert [event.kind for event in store.events(REF)] == ["submitted", "claimed"]


# ------------------------------------------------------------------ claim_verification


def test_claim_verification_leases_a_due_verifying_step(store: StorePort) -> None:
    due = verifying(store)
    assert store.claim_verification(REF, "checker", LEASE, due - timedelta(seconds=1)) is None
    assert last(store)[3] == {"claim": "verify", "reason": "not_due"}
    claim = store.claim_verification(REF, "checker", LEASE, due)
    assert claim is not None and claim.kind == "verify" and claim.owner == "checker"
    assert (claim.step.state, claim.step.lease_owner, claim.step.attempts) == (
        S.VERIFYING,
        "checker",
        1,
    )
    kind, src, dst, detail = last(store)
    assert (kind, src, dst) == ("claimed", S.VERIFYING, S.VERIFYING)
    assert store.events(REF)[-1].label == "claimed for verification"
    assert detail == {
        "claim": "verify",
        "owner": "checker",
        "lease_expires_at": (due + LEASE).isoformat(),
    }
    assert store.claim_verification(REF, "other", LEASE, due) is None
    assert last(store)[:3] == ("noop", S.VERIFYING, S.VERIFYING)
    assert last(store)[3] == {"claim": "verify", "reason": "claimed"}
    again = store.claim_verification(REF, "checker", LEASE, due)
    assert again is not None and again.step == claim.step  # asked again: still ours
    later = store.claim_verification(REF, "other", LEASE, due + LEASE)
    assert later is not None and later.step.version == claim.step.version + 1


def test_claim_verification_refuses_what_is_not_verifying(store: StorePort) -> None:
    submit(store, "pending")
    claimed(store, "running")
    after(store, needs_approval, "human")
    after(store, success, "done")
    for ref, reason in (
        ("pending", "not_due"),
        ("running", "claimed"),
        ("human", "waiting_on_human"),
        ("done", "terminal"),
        ("ghost", "missing"),
    ):
        assert store.claim_verification(ref, "checker", LEASE, LATER) is None
        assert last(store, ref)[0] == "noop"
        assert last(store, ref)[3] == {"claim": "verify", "reason": reason}, ref


# ------------------------------------------------------------------ record


def test_record_success_writes_the_decision_and_the_envelope(store: StorePort) -> None:
    claim = claimed(store)
    recorded = store.record(
        claim, Executed(success(REF)), traits=WRITE, policy=POLICY, now=T0, rng=rng()
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
    assert step.version == claim.step.version + 1 and store.get(REF) == step
    assert recorded.decision.state is S.SUCCEEDED and recorded.decision.evidence_ref == "inv_1"
    event = store.events(REF)[-1]
    assert (event.kind, event.from_state, event.to_state) == ("executed", S.IN_FLIGHT, S.SUCCEEDED)
    assert event.label == recorded.decision.label
    assert event.detail["envelope"] == step.last_envelope
    assert event.detail["evidence_ref"] == "inv_1" and event.detail["action"] == "succeed"


def test_record_correct_input_keeps_flagged_fields_and_fingerprint(store: StorePort) -> None:
    claim = claimed(store)
    recorded = store.record(
        claim, Executed(correct_input(REF)), traits=WRITE, policy=POLICY, now=T0, rng=rng()
    )
    assert recorded is not None
    step = recorded.step
    assert step.state is S.NEEDS_INPUT and step.flagged_fields == ("recipient_email",)
    assert step.fingerprint is not None and step.fingerprint_repeats == 1
    # Once corrected the step gets the policy's whole budget (3) again, announced now.
    assert step.max_attempts == 1 + POLICY.retry.max_attempts and step.due_at is None
    # The record a worker gets back is the row as stored (no read-back needed).
    assert store.get(REF) == step


def test_record_gives_back_the_row_as_stored_after_a_publish_stamp(store: StorePort) -> None:
    # ``mark_published`` writes without a new version: the record must still be the row.
    claim = claimed(store)
    store.mark_published(REF, T0 + MINUTE)
    recorded = store.record(
        claim, Executed(success(REF)), traits=WRITE, policy=POLICY, now=T0, rng=rng()
    )
    assert recorded is not None and recorded.step.published_at == T0 + MINUTE
    assert store.get(REF) == recorded.step


def test_record_after_the_lease_was_lost_writes_nothing(store: StorePort) -> None:
    claim = claimed(store)
    [expired] = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert expired.step.state is S.VERIFYING
    before, events = store.get(REF), store.events(REF)
    outcome = Executed(success(REF))
    assert store.record(claim, outcome, traits=WRITE, policy=POLICY, now=LATER, rng=rng()) is None
    assert store.get(REF) == before and store.events(REF) == events


def test_record_with_another_owner_or_a_spent_claim_writes_nothing(store: StorePort) -> None:
    claim = claimed(store)
    outcome = Executed(success(REF))
    forged = Claim("execute", "intruder", claim.step)
    assert store.record(forged, outcome, traits=WRITE, policy=POLICY, now=T0, rng=rng()) is None
    assert store.get(REF) == claim.step and len(store.events(REF)) == 2
    assert store.record(claim, outcome, traits=WRITE, policy=POLICY, now=T0, rng=rng()) is not None
    # The same claim again: its version moved on, so nothing is written twice.
    assert store.record(claim, outcome, traits=WRITE, policy=POLICY, now=T0, rng=rng()) is None
    assert [e.kind for e in store.events(REF)] == ["submitted", "claimed", "executed"]


@pytest.mark.parametrize(
    ("result", "state"),
    [
        (LookupFound(checked_at=T0, result={"id": 1}, evidence_ref="inv_9"), S.SUCCEEDED),
        (LookupNotFound(checked_at=T0), S.WAITING_RETRY),
        (LookupUnavailable(checked_at=T0), S.VERIFYING),
    ],
)
def test_record_lookup_results(
    store: StorePort, result: LookupFound | LookupNotFound | LookupUnavailable, state: StepState
) -> None:
    verifying(store)
    now = T0 + MINUTE  # past the consistency window
    claim = store.claim_verification(REF, "checker", LEASE, now)
    assert claim is not None
    recorded = store.record(
        claim, LookedUp(result), traits=WRITE, policy=POLICY, now=now, rng=rng()
    )
    assert recorded is not None and recorded.step.state is state
    assert recorded.step.lease_owner is None and recorded.step.attempts == 1
    assert store.get(REF) == recorded.step
    event = store.events(REF)[-1]
    assert event.kind == "looked_up" and "result" not in event.detail["lookup"]
    if isinstance(result, LookupFound):
        assert recorded.step.last_envelope == {
            "ok": True,
            "operation_ref": REF,
            "commit_state": "committed",
            "result": {"id": 1},
            "verification": {"checked_at": "2026-03-01T12:00:00Z", "evidence_ref": "inv_9"},
        }
        assert event.detail["lookup"] == {
            "checked_at": T0.isoformat(),
            "found": True,
            "evidence_ref": "inv_9",
        }
    else:
        # The model sees the envelope the runtime built for the new state; the adapter's
        # stays in the history.
        assert recorded.decision.envelope is not None
        assert recorded.step.last_envelope == to_wire(recorded.decision.envelope)
        assert store.events(REF)[2].detail["envelope"]["code"] == "OUTCOME_UNKNOWN"
    if isinstance(result, LookupNotFound):
        # Found absent: the model is told the write did not happen and will be retried.
        shown = recorded.step.last_envelope
        assert shown is not None and shown["code"] == "OPERATION_NOT_FOUND"
        assert shown["commit_state"] == "not_committed" == recorded.step.commit_state
        assert shown["next_action"] == "wait_and_retry"
    if isinstance(result, LookupUnavailable):
        assert recorded.step.lookups_unavailable == 1
        # Still unknown: the model keeps seeing the unknown outcome it was shown.
        assert recorded.step.last_envelope == store.events(REF)[2].detail["envelope"]
        assert event.detail["lookup"] == {
            "checked_at": T0.isoformat(),
            "unavailable": True,
            "code": "LOOKUP_UNSPECIFIED",
        }


def test_record_a_stale_outcome_is_refused_and_writes_nothing(store: StorePort) -> None:
    verifying(store)
    claim = store.claim_verification(REF, "checker", LEASE, T0 + MINUTE)
    assert claim is not None
    events = store.events(REF)
    with pytest.raises(TransitionRefused) as raised:
        store.record(
            claim, Executed(success(REF)), traits=WRITE, policy=POLICY, now=LATER, rng=rng()
        )
    assert raised.value.code == "STALE_OUTCOME"
    assert store.get(REF) == claim.step and store.events(REF) == events


def test_each_state_change_appends_exactly_its_event(store: StorePort) -> None:
    claim = claimed(store)
    recorded = store.record(
        claim, Executed(unknown(REF)), traits=WRITE, policy=POLICY, now=T0, rng=rng()
    )
    assert recorded is not None and recorded.step.due_at is not None
    due = recorded.step.due_at
    assert store.claim_verification(REF, "worker-2", LEASE, due) is not None
    events = store.events(REF)
    assert [(e.kind, e.from_state, e.to_state) for e in events] == [
        ("submitted", None, S.PENDING),
        ("claimed", S.PENDING, S.IN_FLIGHT),
        ("executed", S.IN_FLIGHT, S.VERIFYING),
        ("claimed", S.VERIFYING, S.VERIFYING),
    ]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert store.get(REF).version == 4  # one version per change, none for the submit
    # The execution's event carries the decision and the envelope it wrote, at its time.
    executed = events[2]
    assert executed.label == recorded.decision.label and executed.at == T0
    assert executed.detail["envelope"] == recorded.step.last_envelope
    assert executed.detail["action"] == recorded.decision.action


def test_of_many_threads_claiming_at_once_exactly_one_wins(store: StorePort) -> None:
    submit(store)
    for index in range(6):
        submit(store, f"due{index}")
    start = threading.Barrier(6)
    claims: list[Claim | None] = []
    handed_out: list[str] = []

    def race(name: str) -> None:
        start.wait()
        claims.append(store.claim_execution(REF, name, LEASE, T0))
        start.wait()
        while batch := store.due_work(T0, limit=2, republish_after=MINUTE):
            handed_out.extend(step.operation_ref for step in batch)

    threads = [threading.Thread(target=race, args=(f"w{index}",)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [claim for claim in claims if claim is not None]
    assert len(won) == 1 and store.get(REF) == won[0].step
    reasons = [e.detail["reason"] for e in store.events(REF) if e.kind == "noop"]
    assert reasons == ["claimed"] * 5
    assert sorted(handed_out) == [f"due{index}" for index in range(6)]  # each once


def test_an_operation_that_fails_halfway_writes_nothing(store: StorePort) -> None:
    claimed(store, "r0")
    claimed(store, "r1", T0 + timedelta(seconds=1))
    asked: list[str] = []

    def policy_for(tool: str) -> Any:
        asked.append(tool)
        if len(asked) == 2:
            raise RuntimeError("policy store down")
        return POLICY

    before = [(store.get(ref), store.events(ref)) for ref in ("r0", "r1")]
    with pytest.raises(RuntimeError, match="policy store down"):
        store.expire_leases(T0 + MINUTE, lambda _: WRITE, policy_for)
    assert len(asked) == 2  # the first step was decided, and then rolled back
    assert [(store.get(ref), store.events(ref)) for ref in ("r0", "r1")] == before
    assert len(store.expire_leases(T0 + MINUTE, lambda _: WRITE, lambda _: POLICY)) == 2
