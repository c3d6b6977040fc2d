"""The client's logic without I/O: submit, its idempotent repeat and its refusals,
corrected input, cancellation, approvals, resolution and wait, over the in-memory store
with a publisher that records (``tests/services/tasks/test_client.py`` runs it on real services)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import ClassVar

import pytest

from tests.support.tasks.memory_support import (
    INPUT,
    SETTINGS,
    TOOL,
    Hint,
    RecordingHints,
    Script,
    ScriptedAdapter,
    conflict,
    correct_input,
    memory_runtime,
    needs_approval,
    now,
    success,
    unknown,
)
from toolsafe.adapters.envelope import to_wire
from toolsafe.adapters.errors import UnknownToolError
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import OperationRefConflict, StepNotFound
from toolsafe.tasks import pipeline
from toolsafe.tasks.client import Client, InvalidInput, WaitTimeout

S = StepState
REF = "run_81/step_4"


class World:
    """A client and a worker's pipeline sharing one in-memory store."""

    def __init__(self) -> None:
        self.adapter = ScriptedAdapter()
        self.runtime, self.store = memory_runtime(self.adapter)
        self.hints = RecordingHints()
        self.client = Client(runtime=self.runtime, hints=self.hints)

    def worker_runs(self, *answers: Script) -> str:
        """A worker takes the step's execute hint and runs it with these answers."""
        self.adapter.answers.extend(answers)
        return pipeline.execute(self.runtime, self.hints, REF)

    def events(self) -> int:
        return len(self.store.events(REF))


@pytest.fixture
def world() -> World:
    return World()


def test_a_client_needs_an_app_or_a_runtime_and_hints(world: World) -> None:
    with pytest.raises(TypeError, match="both a runtime and hints"):
        Client(runtime=world.runtime)
    with pytest.raises(TypeError, match="without an app"):
        _ = world.client.app
    world.client.close()  # nothing of its own to release; the store stays usable
    assert world.store.list_steps() == []


# ------------------------------------------------------------------ submit


def test_submit_commits_then_publishes_once(world: World) -> None:
    before = now()
    view = world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert (view.operation_ref, view.state, view.ui_group) == (REF, S.PENDING, "queued")
    assert [entry.kind for entry in view.history] == ["submitted"]
    assert world.hints.take() == [Hint("execute", REF)]
    step = world.store.get(REF)
    assert step.input == INPUT and step.published_at is not None
    assert before <= step.published_at <= now()


def test_submit_again_returns_the_same_step_and_publishes_nothing(world: World) -> None:
    first = world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.hints.take()
    again = world.client.submit(TOOL, dict(reversed(list(INPUT.items()))), operation_ref=REF)
    assert again.operation_ref == REF and again.state is first.state
    assert again.history == first.history and world.events() == 1
    assert world.hints.take() == []


def test_submit_again_republishes_a_step_whose_submitter_died_before_publishing(
    world: World,
) -> None:
    policy = world.runtime.policy_for(TOOL)
    stale = now() - timedelta(seconds=SETTINGS.sweep.republish_after + 1)
    world.store.submit(TOOL, INPUT, operation_ref=REF, policy=policy, now=stale, published_at=stale)
    world.store.submit(TOOL, INPUT, operation_ref="never", policy=policy, now=now())
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.client.submit(TOOL, INPUT, operation_ref="never")
    assert world.hints.take() == [Hint("execute", REF), Hint("execute", "never")]
    republished = world.store.get(REF).published_at
    assert republished is not None and republished > stale
    assert world.store.get("never").published_at is not None
    assert world.events() == 1  # republishing is bookkeeping, not a change


def test_a_conflicting_submit_is_refused_and_publishes_nothing(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.hints.take()
    stored = world.store.get(REF)
    with pytest.raises(OperationRefConflict) as raised:
        world.client.submit(TOOL, {**INPUT, "amount": 999}, operation_ref=REF)
    assert raised.value.what == "input" and REF in str(raised.value)
    assert world.hints.take() == []
    assert world.store.get(REF) == stored and world.events() == 1


def test_invalid_input_and_unknown_tools_store_and_send_nothing(world: World) -> None:
    with pytest.raises(InvalidInput) as raised:
        world.client.submit(TOOL, {"recipient_email": "a@example.com", "amount": "lots"})
    assert raised.value.errors == (("amount", "INT_PARSING"),) and "amount" in str(raised.value)
    with pytest.raises(UnknownToolError):
        world.client.submit("mystery_tool", INPUT)
    assert world.store.list_steps() == [] and world.hints.take() == []


# ------------------------------------------------------------------ agent actions


def test_provide_input_sends_the_corrected_call_under_the_same_ref(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert world.worker_runs(correct_input) == "wait_input"
    world.hints.take()
    fixed = {**INPUT, "recipient_email": "billing@example.com"}
    view = world.client.provide_input(REF, fixed)
    assert (view.operation_ref, view.state) == (REF, S.PENDING)
    assert world.store.get(REF).input == fixed
    assert world.hints.take() == [Hint("execute", REF, world.store.get(REF).due_at)]
    assert world.worker_runs(success) == "succeed"
    assert world.adapter.calls[-1][1].recipient_email == "billing@example.com"


def test_provide_input_refusals_write_and_send_nothing(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.worker_runs(correct_input)
    world.hints.take()
    stored, events = world.store.get(REF), world.events()
    with pytest.raises(TransitionRefused) as raised:
        world.client.provide_input(REF, dict(INPUT))
    assert raised.value.code == "IDENTICAL_INPUT"
    with pytest.raises(TransitionRefused) as raised:
        world.client.provide_input(REF, {**INPUT, "recipient_email": 5})
    assert raised.value.code == "CORRECTED_INPUT_INVALID"
    assert world.store.get(REF) == stored and world.events() == events
    assert world.hints.take() == []
    with pytest.raises(StepNotFound):
        world.client.provide_input("ghost", INPUT)


def test_cancel_a_waiting_step_but_not_a_finished_one(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.hints.take()
    view = world.client.cancel(REF, reason="plan changed")
    assert (view.state, view.ui_group) == (S.CANCELLED, "terminal")
    assert view.history[-1].kind == "cancelled" and world.hints.take() == []
    # The worker's hint arrives late: nothing runs (R1).
    assert world.worker_runs() == "noop" and world.adapter.calls == []
    with pytest.raises(TransitionRefused) as raised:
        world.client.cancel(REF, reason="again", by="operator")
    assert raised.value.code == "NOT_CANCELLABLE"


# ------------------------------------------------------------------ operators


def test_approve_sends_the_step_back_to_run(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert world.worker_runs(needs_approval) == "wait_approval"
    world.hints.take()
    view = world.client.approve(REF, approver="ops@example.com", reason="customer confirmed")
    assert view.state is S.PENDING
    assert world.hints.take() == [Hint("execute", REF, world.store.get(REF).due_at)]
    event = world.store.events(REF)[-1]
    assert (event.kind, event.detail["approver"]) == ("approved", "ops@example.com")
    assert world.worker_runs(success) == "succeed"
    assert world.adapter.calls[-1][2].approval_ref is not None


def test_reject_fails_the_step_and_sends_nothing(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.worker_runs(needs_approval)
    world.hints.take()
    view = world.client.reject(REF, approver="ops", reason="not this one")
    assert (view.state, view.reason) == (S.FAILED, "REJECTED")
    assert world.hints.take() == []
    with pytest.raises(TransitionRefused) as raised:
        world.client.approve(REF, approver="ops", reason="changed my mind")
    assert raised.value.code == "NOT_AWAITING_APPROVAL"


def test_resolve_closes_an_escalated_step_with_a_reason(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert world.worker_runs(conflict) == "escalate"
    world.hints.take()
    for target, code in ((S.PENDING, "INVALID_RESOLUTION"), ("verifying", "INVALID_RESOLUTION")):
        with pytest.raises(TransitionRefused) as raised:
            world.client.resolve(REF, target, operator="oncall", reason="checked")
        assert raised.value.code == code
    with pytest.raises(TransitionRefused) as raised:
        world.client.resolve(REF, S.SUCCEEDED, operator="oncall", reason="  ")
    assert raised.value.code == "REASON_REQUIRED"
    assert world.store.get(REF).state is S.ESCALATED and world.hints.take() == []
    view = world.client.resolve(REF, "failed", operator="oncall", reason="customer withdrew")
    assert view.state is S.FAILED
    event = world.store.events(REF)[-1]
    assert (event.kind, event.detail["operator"], event.detail["reason"]) == (
        "resolved",
        "oncall",
        "customer withdrew",
    )
    assert world.hints.take() == []


def test_resolving_to_succeeded_needs_evidence_and_says_an_operator_closed_it(
    world: World,
) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert world.worker_runs(conflict) == "escalate"
    before = world.store.get(REF)
    assert before.commit_state == "not_committed"
    for evidence in (None, "", "x" * 201):
        with pytest.raises(TransitionRefused) as raised:
            world.client.resolve(REF, S.SUCCEEDED, "oncall", "seen in billing", evidence=evidence)
        assert raised.value.code == ("EVIDENCE_INVALID" if evidence else "EVIDENCE_REQUIRED")
    # Nothing changed: the view and the stored envelope still agree that nothing was written.
    assert world.store.get(REF) == before and world.events() == 3
    view = world.client.resolve(REF, S.SUCCEEDED, "oncall", "seen in billing", evidence="inv_204")
    stored = world.store.get(REF).last_envelope
    assert stored is not None
    assert view.commit_state == stored["commit_state"] == "committed"
    assert stored["result"]["resolved_by"] == "operator"
    assert stored["verification"]["evidence_ref"] == "inv_204"
    assert view.ui_group == "resolved by an operator"
    assert "confirmed" not in view.text and "evidence inv_204" in view.text
    assert world.store.events(REF)[-1].detail["evidence"] == "inv_204"


class BlindAdapter(ScriptedAdapter):
    """A write with no lookup: an unknown outcome escalates at once."""

    has_lookup: ClassVar[bool] = False


def test_resolving_an_unknown_write_to_failed_needs_the_statement(world: World) -> None:
    world.adapter = BlindAdapter()
    world.runtime, world.store = memory_runtime(world.adapter)
    world.client = Client(runtime=world.runtime, hints=world.hints)
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    assert world.worker_runs(unknown) == "escalate"
    assert world.store.get(REF).commit_state == "unknown"
    with pytest.raises(TransitionRefused) as raised:
        world.client.resolve(REF, "failed", "oncall", "no invoice in billing")
    assert raised.value.code == "NOT_WRITTEN_UNCONFIRMED"
    view = world.client.resolve(
        REF, "failed", "oncall", "no invoice in billing", confirm_not_written=True
    )
    assert (view.state, view.commit_state) == (S.FAILED, "not_committed")
    assert view.envelope is not None and to_wire(view.envelope)["commit_state"] == "not_committed"
    assert world.store.events(REF)[-1].detail["confirm_not_written"] is True


def test_redrive_sends_an_escalated_step_back_to_run(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.worker_runs(conflict)
    world.hints.take()
    view = world.client.redrive(REF, operator="oncall", reason="conflict cleared")
    assert view.state is S.PENDING and view.operation_ref == REF
    assert world.hints.take() == [Hint("execute", REF, world.store.get(REF).due_at)]
    assert world.worker_runs(success) == "succeed"
    assert world.store.get(REF).attempts == 2


def test_list_shows_views_newest_first(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref="first")
    world.client.submit(TOOL, INPUT, operation_ref="second")
    world.client.cancel("first", reason="not needed")
    assert [v.operation_ref for v in world.client.list()] == ["second", "first"]
    assert [v.operation_ref for v in world.client.list([S.CANCELLED])] == ["first"]


# ------------------------------------------------------------------ wait


def test_wait_returns_once_the_step_needs_the_agent(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    with pytest.raises(WaitTimeout) as raised:
        world.client.wait(REF, timeout=0)
    assert raised.value.state == "pending" and REF in str(raised.value)
    world.adapter.answers.append(success)
    worker = threading.Thread(target=pipeline.execute, args=(world.runtime, world.hints, REF))
    worker.start()
    view = world.client.wait(REF, timeout=10, poll=0.001)
    worker.join()
    assert view.state is S.SUCCEEDED and view.terminal
    assert view.envelope is not None and to_wire(view.envelope)["ok"] is True
    with pytest.raises(StepNotFound):
        world.client.wait("ghost", timeout=0)


def test_wait_returns_for_a_step_waiting_on_input(world: World) -> None:
    world.client.submit(TOOL, INPUT, operation_ref=REF)
    world.worker_runs(correct_input)
    view = world.client.wait(REF, timeout=0)
    assert view.state is S.NEEDS_INPUT and view.fields == ("recipient_email",)
    assert view.needs_agent and not view.terminal
