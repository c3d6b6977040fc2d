"""The store writes the runtime's envelope with every change: the issue's cases on
PostgreSQL and SQLite, each read back through the view the model gets."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test
from sqlalchemy import Engine

from tests.services.recovery.test_store_stateful import StoreMachine
from tests.support.recovery.envelope_agreement import assert_agrees
from tests.support.recovery.store_support import (
    BLIND_WRITE,
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    create_step,
    needs_approval,
    retry_later,
    unknown,
)
from toolsafe.adapters.envelope import ToolError, to_wire
from toolsafe.adapters.protocol import LookupNotFound, LookupUnavailable
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits, VerificationPolicy
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.tasks.views import build_view

S = StepState
RNG = random.Random(3)
STRICT = Policy(
    retry=RetryPolicy(max_attempts=1),
    # A short time budget: the second unavailable lookup (5 s in) spends it.
    verification=VerificationPolicy(max_unavailable=2, budget=timedelta(seconds=2)),
    loop_guard=3,
)


def _shown(store: StepStore, ref: str) -> dict[str, object]:
    step = store.get(ref)
    view = build_view(step, store.events(ref))
    assert_agrees(
        state=step.state,
        commit_state=step.commit_state,
        attempts=step.attempts,
        max_attempts=step.max_attempts,
        due_at=step.due_at,
        reason=step.reason,
        flagged=step.flagged_fields,
        operation_ref=ref,
        shown=view.envelope_json(),
    )
    assert view.envelope is not None
    return to_wire(view.envelope)


def _execute(
    store: StepStore,
    ref: str,
    envelope: Callable[[str], ToolError],
    traits: ToolTraits = WRITE,
    policy: Policy = POLICY,
) -> None:
    create_step(store, "create_invoice", INPUT, operation_ref=ref, policy=policy, now=T0)
    claim = store.claim_execution(ref, "w1", LEASE, T0)
    assert claim is not None
    assert _shown_or_none(store, ref) is None  # in_flight: no outcome yet
    store.record(claim, Executed(envelope(ref)), traits=traits, policy=policy, now=T0, rng=RNG)


def _shown_or_none(store: StepStore, ref: str) -> object:
    return build_view(store.get(ref)).envelope


def _lookup(store: StepStore, ref: str, result: object, at: timedelta) -> None:
    now = T0 + at
    claim = store.claim_verification(ref, "w2", LEASE, now)
    assert claim is not None
    assert isinstance(result, LookupNotFound | LookupUnavailable)
    store.record(claim, LookedUp(result), traits=WRITE, policy=STRICT, now=now, rng=RNG)


def test_escalated_after_lookup_unavailable_no_longer_says_checking(store: StepStore) -> None:
    _execute(store, "e1", unknown, policy=STRICT)
    assert _shown(store, "e1")["next_action"] == "verify_operation"
    for seconds in (1, 5):
        step = store.get("e1")
        at = (step.due_at or T0) - T0 + timedelta(seconds=seconds)
        _lookup(store, "e1", LookupUnavailable(checked_at=T0 + at), at)
    assert store.get("e1").state is S.ESCALATED
    shown = _shown(store, "e1")
    assert shown["code"] == "LOOKUP_UNAVAILABLE" and shown["next_action"] == "escalate"
    assert "checking" not in str(shown["user_message"]).lower()
    # The adapter's envelope stays in the history.
    executed = next(e for e in store.events("e1") if e.kind == "executed")
    assert executed.detail["envelope"]["code"] == "OUTCOME_UNKNOWN"


def test_exhausted_retries_do_not_promise_a_retry(store: StepStore) -> None:
    _execute(store, "e2", lambda ref: retry_later(ref, T0 + timedelta(seconds=5), 1), policy=STRICT)
    step = store.get("e2")
    assert step.state is S.ESCALATED and step.reason == "ATTEMPTS_EXHAUSTED"
    shown = _shown(store, "e2")
    assert shown["code"] == "ATTEMPTS_EXHAUSTED"
    assert shown["safe_details"] == {"last_code": "RATE_LIMITED", "tool": "create_invoice"}
    assert "retry automatically" not in str(shown["user_message"])


def test_rejected_step_no_longer_waits_for_approval(store: StepStore) -> None:
    _execute(store, "e3", needs_approval)
    assert _shown(store, "e3")["next_action"] == "request_approval"
    store.reject("e3", approver="ops", reason="no", traits=WRITE, policy=POLICY, now=T0)
    shown = _shown(store, "e3")
    assert store.get("e3").state is S.FAILED
    assert (shown["code"], shown["next_action"]) == ("REJECTED", "escalate")


def test_found_absent_is_not_committed_and_retried(store: StepStore) -> None:
    _execute(store, "e4", unknown)
    _lookup(store, "e4", LookupNotFound(checked_at=T0 + timedelta(minutes=1)), timedelta(minutes=1))
    step = store.get("e4")
    assert step.state is S.WAITING_RETRY and step.commit_state == "not_committed"
    shown = _shown(store, "e4")
    assert (shown["code"], shown["commit_state"]) == ("OPERATION_NOT_FOUND", "not_committed")


def test_blind_write_killed_mid_call_has_an_envelope(store: StepStore) -> None:
    create_step(store, "t", INPUT, operation_ref="e5", policy=POLICY, now=T0)
    assert store.claim_execution("e5", "w1", LEASE, T0) is not None
    later = T0 + LEASE + timedelta(seconds=1)
    expired = store.expire_leases(later, lambda _: BLIND_WRITE, lambda _: POLICY)
    assert [r.step.state for r in expired] == [S.ESCALATED]
    shown = _shown(store, "e5")
    assert (shown["code"], shown["commit_state"]) == ("UNVERIFIABLE_UNKNOWN", "unknown")


@pytest.mark.parametrize("to", [S.SUCCEEDED, S.FAILED, S.PENDING])
def test_operator_resolution_says_so(store: StepStore, to: StepState) -> None:
    _execute(store, "e6", unknown, traits=BLIND_WRITE)
    assert store.get("e6").state is S.ESCALATED
    if to is S.PENDING:
        with pytest.raises(Exception, match="REDRIVE_UNVERIFIABLE"):
            store.resolve("e6", operator="ops", reason="x", to=to, traits=BLIND_WRITE,
                          policy=POLICY, now=T0)  # fmt: skip
        return
    store.resolve("e6", operator="ops", reason="checked the ledger", to=to,
                  traits=BLIND_WRITE, policy=POLICY, now=T0, evidence="ledger/81",
                  confirm_not_written=to is S.FAILED)  # fmt: skip
    shown = _shown(store, "e6")
    view = build_view(store.get("e6"), store.events("e6"))
    assert view.ui_group == "resolved by an operator"
    assert "resolved as" in view.text and "by an operator (ops)" in view.text
    assert "confirmed" not in view.text
    if to is S.SUCCEEDED:
        assert shown["result"] == {
            "resolved_by": "operator", "operator": "ops", "reason": "checked the ledger",
            "evidence": "ledger/81",
        }  # fmt: skip
        assert shown["verification"] == {"checked_at": T0.isoformat().replace("+00:00", "Z"),
                                          "evidence_ref": "ledger/81"}  # fmt: skip
        assert "with evidence ledger/81" in view.text
    else:
        assert shown["code"] == "OPERATOR_RESOLVED" and "ops" in str(shown["agent_message"])
        # The operator stated that nothing was written: the envelope and the step agree.
        assert shown["commit_state"] == view.commit_state == "not_committed"
    assert view.history[-1].detail["evidence"] == "ledger/81"


def test_cancelled_pending_step_wrote_nothing(store: StepStore) -> None:
    create_step(store, "t", INPUT, operation_ref="e7", policy=POLICY, now=T0)
    assert build_view(store.get("e7")).envelope is None  # pending: no outcome yet
    store.cancel("e7", by="agent", reason="plan changed", traits=WRITE, policy=POLICY, now=T0)
    shown = _shown(store, "e7")
    assert (shown["code"], shown["commit_state"]) == ("CANCELLED", "not_committed")


class AgreeingMachine(StoreMachine):
    """The store's random-sequence machine (outcomes, lookups, lease expiries, input,
    approvals, rejections, cancellations, resolutions) with one more invariant: every
    step's view shows an envelope that agrees with its state."""

    @invariant()
    def every_view_agrees(self) -> None:
        for step in self.store.list_steps():
            assert_agrees(
                state=step.state,
                commit_state=step.commit_state,
                attempts=step.attempts,
                max_attempts=step.max_attempts,
                due_at=step.due_at,
                reason=step.reason,
                flagged=step.flagged_fields,
                operation_ref=step.operation_ref,
                shown=build_view(step).envelope_json(),
            )


@pytest.mark.postgres
@pytest.mark.slow
def test_store_paths_keep_the_envelope_in_agreement(store_pg_engine: Engine) -> None:
    class OnThisDatabase(AgreeingMachine):
        def __init__(self) -> None:
            super().__init__(store_pg_engine)

    run_state_machine_as_test(
        OnThisDatabase,
        settings=settings(
            max_examples=15,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
