"""The pipeline's decisions without I/O: execute, verify, record and escalate over the
in-memory store, with a scripted adapter and a publisher that records (the fixtures:
tests/unit/tasks/conftest.py). The sweep's are test_sweep_decisions.py."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from tests.support.tasks.memory_support import (
    INPUT,
    SETTINGS,
    TOOL,
    Hint,
    RecordingHints,
    ScriptedAdapter,
    conflict,
    correct_input,
    needs_approval,
    now,
    retry_in,
    success,
    unknown,
)
from tests.support.tasks.pipeline_steps import (
    LEASE,
    REF,
    kinds,
    submit,
    verifying_since,
)
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.records import Claim, ClaimKind, Refused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.memory.backend import memory_backend
from toolsafe.tasks import pipeline, sweeper
from toolsafe.tasks.escalation import EscalationNotice
from toolsafe.tasks.follow_up import StepReport
from toolsafe.tasks.runtime import Runtime

S = StepState


# ------------------------------------------------------------------ execute


def test_execute_a_success_records_it_and_publishes_nothing(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(success)
    assert pipeline.execute(runtime, hints, REF) == "succeed"
    step = store.get(REF)
    assert (step.state, step.commit_state, step.attempts, step.lease_owner) == (
        S.SUCCEEDED,
        "committed",
        1,
        None,
    )
    assert step.last_envelope is not None and step.last_envelope["ok"] is True
    [(sent_ref, data, context)] = adapter.calls
    assert (sent_ref, data.model_dump(), context.attempt, context.approval_ref) == (
        REF,
        INPUT,
        1,
        None,
    )
    assert hints.take() == []
    assert kinds(store) == ["submitted", "claimed", "executed"]


def test_execute_an_unknown_outcome_publishes_the_verification(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(unknown)
    assert pipeline.execute(runtime, hints, REF) == "verify"
    step = store.get(REF)
    assert (step.state, step.commit_state) == (S.VERIFYING, "unknown")
    assert hints.take() == [Hint("verify", REF, step.due_at)]
    # Stamped with the time the hint arrives, so the sweeper leaves it alone till then.
    assert step.due_at is not None and step.published_at == step.due_at > step.updated_at
    # Never executed again before verification, however often the hint comes.
    assert pipeline.execute(runtime, hints, REF) == "noop"
    assert len(adapter.calls) == 1 and store.events(REF)[-1].detail["reason"] == "unknown_outcome"


def test_execute_a_short_retry_publishes_it_with_its_due_time(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(retry_in(SETTINGS.broker.max_eta / 2))
    assert pipeline.execute(runtime, hints, REF) == "run"
    step = store.get(REF)
    assert step.state is S.WAITING_RETRY and step.due_at is not None
    assert hints.take() == [Hint("execute", REF, step.due_at, recovery=True)]
    assert step.published_at == step.due_at
    # An early hint (the ETA ran ahead of the due time) does nothing harmful (R6).
    assert pipeline.execute(runtime, hints, REF) == "noop"
    assert store.events(REF)[-1].detail["reason"] == "not_due" and len(adapter.calls) == 1


def test_execute_a_retry_beyond_max_eta_is_parked_until_the_release(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(retry_in(SETTINGS.broker.max_eta + 100))
    assert pipeline.execute(runtime, hints, REF) == "run"
    step = store.get(REF)
    assert step.state is S.WAITING_RETRY and step.due_at is not None and hints.take() == []
    assert step.published_at is None  # nothing went out: the delay is parked in the store
    lookahead = timedelta(seconds=SETTINGS.broker.max_eta)
    # Too early: nothing is released before the due time comes within max_eta.
    assert sweeper.release(runtime, hints, step.due_at - lookahead - timedelta(seconds=1)) == 0
    assert hints.take() == []
    # max_eta ahead: its hint goes out with the due time as ETA, once.
    released_at = step.due_at - lookahead
    assert sweeper.release(runtime, hints, released_at) == 1
    assert hints.take() == [Hint("execute", REF, step.due_at, recovery=True)]
    assert store.get(REF).published_at == step.due_at
    assert sweeper.release(runtime, hints, released_at + timedelta(seconds=1)) == 0
    assert hints.take() == []
    # The hint got lost: due_work re-publishes it republish_after past the due time.
    late = step.due_at + timedelta(seconds=SETTINGS.sweep.republish_after + 1)
    assert [s.operation_ref for s in store.due_work(late, 10, timedelta(seconds=30))] == [REF]


def test_a_lost_retry_is_sent_again_in_the_recovery_lane_a_new_step_in_the_execute_queue(
    runtime: Runtime,
    store: MemoryStore,
    hints: RecordingHints,
    adapter: ScriptedAdapter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lane follows the step, whoever sends its hint: a step waiting to retry waits
    in no backlog of new submissions, a new one takes its turn in the execute queue."""
    submit(runtime)
    adapter.answers.append(retry_in(SETTINGS.broker.max_eta / 2))
    assert pipeline.execute(runtime, hints, REF) == "run"
    retry = store.get(REF)
    assert retry.due_at is not None and hints.take() != []  # that hint is lost
    submit(runtime, "fresh")  # never run, and its hint is lost too
    late = retry.due_at + timedelta(seconds=SETTINGS.sweep.republish_after + 1)
    monkeypatch.setattr(runtime, "now", lambda: late)
    assert sweeper.sweep(runtime, hints, lambda: 0)["republished"] == 2
    sent = {(hint.kind, hint.operation_ref, hint.recovery) for hint in hints.take()}
    assert sent == {("execute", REF, True), ("execute", "fresh", False)}


def test_execute_correctable_input_waits_for_the_agent(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(correct_input)
    assert pipeline.execute(runtime, hints, REF) == "wait_input"
    step = store.get(REF)
    assert (step.state, step.flagged_fields, step.due_at) == (
        S.NEEDS_INPUT,
        ("recipient_email",),
        None,
    )
    assert hints.take() == []


def test_execute_after_approval_sends_the_approval_downstream(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.extend([needs_approval, success])
    assert pipeline.execute(runtime, hints, REF) == "wait_approval"
    waiting = store.get(REF)
    assert waiting.state is S.AWAITING_APPROVAL
    approved = store.approve(
        REF,
        approver="ops",
        reason="ok",
        input_hash=waiting.input_hash,
        traits=runtime.traits_for(TOOL),
        policy=runtime.policy_for(TOOL),
        now=now(),
    )
    assert pipeline.execute(runtime, hints, REF) == "succeed"
    first, second = (context for _, _, context in adapter.calls)
    assert first.approval_ref is None
    assert second.approval_ref == pipeline.approval_ref(approved.step)
    assert second.approval_ref is not None and second.approval_ref.startswith("appr_")
    assert second.attempt == 2
    # The adapter is told the runtime's own budget after each call: the approval gave it
    # whole again, although the attempt number counts on.
    budget = runtime.policy_for(TOOL).retry.max_attempts
    assert (first.attempts_left, second.attempts_left) == (budget - 1, budget - 1)


def test_execute_a_conflict_escalates_and_notifies(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(conflict)
    assert pipeline.execute(runtime, hints, REF) == "escalate"
    step = store.get(REF)
    assert (step.state, step.reason) == (S.ESCALATED, "VERSION_CONFLICT")
    assert hints.take() == [Hint("escalation", REF)]


def test_execute_a_tool_no_worker_knows_escalates_without_a_call(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime, tool="mystery_tool")
    assert pipeline.execute(runtime, hints, REF) == "escalate"
    step = store.get(REF)
    assert step.state is S.ESCALATED and step.commit_state == "not_committed"
    assert step.last_envelope is not None and step.last_envelope["code"] == pipeline.UNKNOWN_TOOL
    assert adapter.calls == [] and hints.take() == [Hint("escalation", REF)]


def test_execute_is_a_noop_for_a_claimed_or_missing_step(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    assert store.claim_execution(REF, "other-worker", LEASE, now()) is not None
    assert pipeline.execute(runtime, hints, REF) == "noop"
    assert pipeline.execute(runtime, hints, "ghost") == "noop"
    assert store.events(REF)[-1].detail == {"claim": "execute", "reason": "claimed"}
    assert store.events("ghost")[-1].detail == {"claim": "execute", "reason": "missing"}
    assert adapter.calls == [] and hints.take() == []
    assert store.get(REF).lease_owner == "other-worker"


def test_a_lease_lost_during_the_call_records_nothing(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)

    def sweeper_runs_meanwhile() -> None:
        # The call outlived its lease: a sweeper moved the step to verification (R4).
        late = now() + 2 * LEASE
        [expired] = store.expire_leases(late, runtime.traits_for, runtime.policy_for)
        assert expired.step.state is S.VERIFYING

    adapter.while_calling = sweeper_runs_meanwhile
    adapter.answers.append(success)
    assert pipeline.execute(runtime, hints, REF) == "lease_lost"
    step = store.get(REF)
    assert (step.state, step.commit_state) == (S.VERIFYING, "unknown")
    assert "executed" not in kinds(store) and hints.take() == []


# ------------------------------------------------------------------ verify


def test_verify_found_succeeds_without_a_second_write(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    adapter.lookups.append(
        lambda: LookupFound(checked_at=now(), result={"id": 7}, evidence_ref="inv:7")
    )
    assert pipeline.verify(runtime, hints, REF) == "succeed"
    step = store.get(REF)
    assert (step.state, step.commit_state) == (S.SUCCEEDED, "committed")
    assert (
        step.last_envelope is not None
        and step.last_envelope["verification"]["evidence_ref"] == "inv:7"
    )
    assert adapter.looked_up == [REF] and adapter.calls == [] and hints.take() == []


def test_verify_not_found_after_the_window_retries_under_the_same_ref_in_its_own_slot(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    adapter.lookups.append(lambda: LookupNotFound(checked_at=now()))
    adapter.answers.append(success)
    # The task that proved the write absent runs the retry itself: no hint waits for a
    # free pool slot, and the retry is an ordinary claim of the same step.
    assert pipeline.verify(runtime, hints, REF) == "succeed"
    step = store.get(REF)
    assert (step.state, step.commit_state, step.attempts) == (S.SUCCEEDED, "committed", 2)
    [(sent_ref, _, context)] = adapter.calls
    assert (sent_ref, context.attempt) == (REF, 2)
    assert hints.take() == []
    assert kinds(store)[-4:] == ["claimed", "looked_up", "claimed", "executed"]


def test_a_slow_lookup_leaves_the_retry_it_allows_to_the_recovery_lane(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    adapter.lookups.append(lambda: LookupNotFound(checked_at=now()))
    # The task began longer ago than the share of its limit a retry here may lose.
    late = SETTINGS.calls.soft_time_limit * pipeline.RETRY_HERE_SHARE + 1
    assert pipeline.verify(runtime, hints, REF, started=time.monotonic() - late) == "run"
    step = store.get(REF)
    assert step.state is S.WAITING_RETRY and step.operation_ref == REF
    # The killed call's second chance goes out in the recovery lane, not behind the
    # execute queue's backlog; an ordinary retry does not (the tests above).
    assert hints.take() == [Hint("execute", REF, step.due_at, recovery=True)]
    assert adapter.calls == []


def test_a_retry_claimed_elsewhere_first_still_gets_its_hint(
    runtime: Runtime,
    store: MemoryStore,
    hints: RecordingHints,
    adapter: ScriptedAdapter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verifying_since(runtime)
    adapter.lookups.append(lambda: LookupNotFound(checked_at=now()))
    claim = store.claim

    def another_worker_first(
        kind: ClaimKind, operation_ref: str, owner: str, lease: timedelta, at: datetime
    ) -> Claim | Refused:
        if kind == "execute":
            claim(kind, operation_ref, "other-worker", lease, at)
        return claim(kind, operation_ref, owner, lease, at)

    monkeypatch.setattr(store, "claim", another_worker_first)
    report = StepReport(REF)
    assert pipeline.verify(runtime, hints, REF, report) == "run"
    # The task reports what its verification recorded, not the claim refused after it.
    assert report.result()["state"] == "waiting_retry" and "note" not in report.result()
    step = store.get(REF)
    # Nothing was called here; the step is the other worker's, and the hint went out as
    # it would have (a second hint is harmless, R1).
    assert (step.state, step.lease_owner) == (S.IN_FLIGHT, "other-worker")
    assert adapter.calls == []
    [hint] = hints.take()
    assert (hint.kind, hint.operation_ref, hint.recovery) == ("execute", REF, True)


def test_a_cancel_asked_for_while_verifying_cancels_a_write_found_absent(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    assert store.request_cancel(REF, by="agent", reason="plan changed", now=now()) is S.VERIFYING
    adapter.lookups.append(lambda: LookupNotFound(checked_at=now()))
    assert pipeline.verify(runtime, hints, REF) == "cancel"
    step = store.get(REF)
    assert (step.state, step.commit_state) == (S.CANCELLED, "not_committed")
    assert kinds(store)[-2:] == ["looked_up", "cancelled"] and adapter.calls == []
    assert hints.take() == []  # no retry: nothing is written again


def test_a_cancel_asked_for_while_verifying_never_cancels_a_write_that_happened(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    store.request_cancel(REF, by="agent", reason="plan changed", now=now())
    adapter.lookups.append(
        lambda: LookupFound(checked_at=now(), result={"id": 7}, evidence_ref="inv:7")
    )
    assert pipeline.verify(runtime, hints, REF) == "succeed"
    assert store.get(REF).state is S.SUCCEEDED


def test_a_cancel_asked_for_while_running_takes_effect_instead_of_the_retry(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)

    def ask() -> None:
        store.request_cancel(REF, by="agent", reason="plan changed", now=now())

    adapter.while_calling = ask
    adapter.answers.append(retry_in(30))
    assert pipeline.execute(runtime, hints, REF) == "cancel"
    assert store.get(REF).state is S.CANCELLED
    assert hints.take() == [] and len(adapter.calls) == 1


def test_verify_with_the_lookup_down_tries_again_later(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime)
    adapter.lookups.append(lambda: LookupUnavailable(checked_at=now()))
    assert pipeline.verify(runtime, hints, REF) == "verify"
    step = store.get(REF)
    assert (step.state, step.lookups_unavailable) == (S.VERIFYING, 1)
    assert step.due_at is not None and step.due_at > now() - timedelta(seconds=1)
    assert hints.take() == [Hint("verify", REF, step.due_at)]


def test_verify_is_a_noop_when_nothing_is_due(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    assert pipeline.verify(runtime, hints, REF) == "noop"
    assert pipeline.verify(runtime, hints, "ghost") == "noop"
    assert store.events(REF)[-1].detail == {"claim": "verify", "reason": "not_due"}
    assert adapter.looked_up == [] and hints.take() == []
    assert store.get(REF).state is S.PENDING


def test_verify_of_a_tool_no_worker_knows_escalates(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    verifying_since(runtime, "other")
    # A worker that does not load the only adapter that could look it up.
    elsewhere = Runtime(SETTINGS, backend=memory_backend(store), registry=Registry())
    assert pipeline.verify(elsewhere, hints, "other") == "escalate"
    assert store.get("other").state is S.ESCALATED
    assert hints.take() == [Hint("escalation", "other")]


# ------------------------------------------------------------------ escalate


def test_escalate_notifies_every_handler_of_an_escalated_step(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(conflict)
    pipeline.execute(runtime, hints, REF)
    seen: list[EscalationNotice] = []

    def broken(notice: EscalationNotice) -> None:
        raise RuntimeError("handler down")

    assert pipeline.escalate(runtime, [("seen", seen.append)], REF) == "notified"
    [notice] = seen
    assert (notice.operation_ref, notice.reason, notice.state) == (
        REF,
        "VERSION_CONFLICT",
        "escalated",
    )
    assert [entry.kind for entry in notice.history] == kinds(store)
    # Delivered: a duplicate or late hint tells nobody again (the outbox notice is closed).
    assert pipeline.escalate(runtime, [("seen", seen.append)], REF) == "noop"
    assert len(seen) == 1
    [closed] = store.outbox.notices(REF)
    assert not closed.open and closed.outcome == "delivered"


def test_a_failing_escalation_handler_leaves_the_notice_open_for_a_resend(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints, adapter: ScriptedAdapter
) -> None:
    submit(runtime)
    adapter.answers.append(conflict)
    pipeline.execute(runtime, hints, REF)
    seen: list[EscalationNotice] = []

    def broken(notice: EscalationNotice) -> None:
        raise RuntimeError("handler down")

    assert pipeline.escalate(runtime, [("broken", broken), ("seen", seen.append)], REF) == (
        "handler_failed"
    )
    assert len(seen) == 1  # a failing handler does not keep the others from hearing
    [owed] = store.outbox.notices(REF, open_only=True)
    assert pipeline.escalate(runtime, [("seen", seen.append)], REF) == "notified"
    assert [n.dedup_key for n in seen] == [owed.dedup_key, owed.dedup_key]
    assert store.outbox.notices(REF, open_only=True) == []


def test_escalate_is_a_noop_once_resolved_or_for_a_missing_step(
    runtime: Runtime, store: MemoryStore
) -> None:
    submit(runtime)
    seen: list[EscalationNotice] = []
    assert pipeline.escalate(runtime, [("seen", seen.append)], REF) == "noop"
    assert pipeline.escalate(runtime, [("seen", seen.append)], "ghost") == "noop"
    assert seen == []
