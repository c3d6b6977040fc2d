"""The store port's contract for the agents' and operators' actions, on every
implementation: corrected input, approvals, cancel and resolve, each refused one
writing nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

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
    unchanged,
    valid,
)
from tests.support.recovery.store_support import (
    BLIND_WRITE,
    LEASE,
    POLICY,
    WRITE,
    correct_input,
    escalate,
    needs_approval,
    retry_later,
    unknown,
)
from toolsafe.adapters.protocol import FieldError, LookupNotFound
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import (
    StepNotFound,
    StorePort,
)


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


# ------------------------------------------------------------------ agents and operators


def test_provide_input_sends_the_corrected_call_under_the_same_ref(store: StorePort) -> None:
    after(store, correct_input)
    old = store.get(REF)
    fixed = {**old.input, "recipient_email": "billing@example.com"}
    recorded = store.provide_input(
        REF, fixed, validate=valid, traits=WRITE, policy=POLICY, now=LATER
    )
    step = recorded.step
    assert (step.state, step.operation_ref, step.input, step.due_at) == (
        S.PENDING,
        REF,
        fixed,
        LATER,
    )
    assert step.input_hash != old.input_hash and recorded.decision.input_hash == step.input_hash
    assert step.attempts == old.attempts and step.version == old.version + 1
    kind, src, dst, detail = last(store)
    assert (kind, src, dst) == ("input_provided", S.NEEDS_INPUT, S.PENDING)
    assert detail["input_hash"] == step.input_hash
    assert detail["changed_fields"] == ["recipient_email"]
    assert "billing@example.com" not in str(detail)
    assert store.claim_execution(REF, "worker-2", LEASE, LATER) is not None


def test_provide_input_refusals(store: StorePort) -> None:
    after(store, correct_input)
    data = store.get(REF).input

    def send(new: Mapping[str, Any], validate: Any = valid, ref: str = REF) -> Any:
        return lambda: store.provide_input(
            ref, new, validate=validate, traits=WRITE, policy=POLICY, now=LATER
        )

    def invalid(_: Mapping[str, Any]) -> list[FieldError]:
        return [FieldError("recipient_email", "VALUE_ERROR")]

    same = dict(reversed(list(data.items())))
    assert unchanged(store, REF, send(same)).code == "IDENTICAL_INPUT"
    assert unchanged(store, REF, send({**data, "amount": 5})).code == "FLAGGED_FIELD_UNCHANGED"
    fixed = {**data, "recipient_email": "x"}
    assert unchanged(store, REF, send(fixed, invalid)).code == "CORRECTED_INPUT_INVALID"
    submit(store, "fresh")
    assert unchanged(store, "fresh", send({"a": 1}, ref="fresh")).code == "NOT_NEEDS_INPUT"
    with pytest.raises(StepNotFound):
        send({}, ref="ghost")()


def test_approve_binds_to_the_input_hash(store: StorePort) -> None:
    after(store, needs_approval)
    step = store.get(REF)
    assert step.state is S.AWAITING_APPROVAL and step.approval_input_hash == step.input_hash

    def approve(digest: str) -> Any:
        return store.approve(
            REF,
            approver="ops@example.com",
            reason="customer confirmed",
            input_hash=digest,
            traits=WRITE,
            policy=POLICY,
            now=LATER,
        )

    assert unchanged(store, REF, lambda: approve("sha256:other")).code == "APPROVAL_INPUT_MISMATCH"
    recorded = approve(step.input_hash)
    assert (recorded.step.state, recorded.step.due_at) == (S.PENDING, LATER)
    kind, src, dst, detail = last(store)
    assert (kind, src, dst) == ("approved", S.AWAITING_APPROVAL, S.PENDING)
    assert (detail["approver"], detail["reason"], detail["input_hash"]) == (
        "ops@example.com",
        "customer confirmed",
        step.input_hash,
    )
    assert unchanged(store, REF, lambda: approve(step.input_hash)).code == "NOT_AWAITING_APPROVAL"


def test_reject_fails_the_step(store: StorePort) -> None:
    after(store, needs_approval)

    def reject() -> Any:
        return store.reject(
            REF, approver="ops", reason="not this one", traits=WRITE, policy=POLICY, now=LATER
        )

    recorded = reject()
    assert (recorded.step.state, recorded.step.reason) == (S.FAILED, "REJECTED")
    kind, _src, dst, detail = last(store)
    assert (kind, dst, detail["approver"], detail["reason"]) == (
        "rejected",
        S.FAILED,
        "ops",
        "not this one",
    )
    assert unchanged(store, REF, reject).code == "NOT_AWAITING_APPROVAL"
    with pytest.raises(StepNotFound):
        store.reject("ghost", approver="o", reason="r", traits=WRITE, policy=POLICY, now=LATER)


def test_cancel_a_waiting_step_but_not_a_running_one(store: StorePort) -> None:
    submit(store, "r1")
    recorded = store.cancel(
        "r1", by="agent-7", reason="plan changed", traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.state is S.CANCELLED and recorded.step.due_at is None
    kind, src, dst, detail = last(store, "r1")
    assert (kind, src, dst, detail["by"], detail["reason"]) == (
        "cancelled",
        S.PENDING,
        S.CANCELLED,
        "agent-7",
        "plan changed",
    )
    claimed(store, "r2")

    def cancel() -> Any:
        return store.cancel("r2", by="a", reason="r", traits=WRITE, policy=POLICY, now=LATER)

    assert unchanged(store, "r2", cancel).code == "NOT_CANCELLABLE"
    with pytest.raises(StepNotFound):
        store.cancel("ghost", by="a", reason="r", traits=WRITE, policy=POLICY, now=LATER)


def test_a_cancel_request_is_recorded_without_changing_the_step(store: StorePort) -> None:
    claimed(store, "r3")
    before = store.get("r3")
    state = store.request_cancel("r3", by="agent-7", reason="plan changed", now=LATER)
    assert state is S.IN_FLIGHT
    step = store.get("r3")
    assert (step.state, step.version, step.lease_owner) == (
        before.state,
        before.version,
        before.lease_owner,
    )
    kind, src, dst, detail = last(store, "r3")
    assert (kind, src, dst, detail["by"], detail["reason"]) == (
        "cancel_requested",
        S.IN_FLIGHT,
        S.IN_FLIGHT,
        "agent-7",
        "plan changed",
    )
    with pytest.raises(StepNotFound):
        store.request_cancel("ghost", by="a", reason="r", now=LATER)


@pytest.mark.parametrize("to", [S.SUCCEEDED, S.FAILED])
def test_resolve_closes_an_escalated_step(store: StorePort, to: StepState) -> None:
    after(store, escalate)
    assert store.get(REF).state is S.ESCALATED
    recorded = store.resolve(
        REF,
        operator="oncall",
        reason="checked the ledger",
        to=to,
        traits=WRITE,
        policy=POLICY,
        now=LATER,
        evidence="ledger/81" if to is S.SUCCEEDED else None,
    )
    assert recorded.step.state is to
    kind, src, dst, detail = last(store)
    assert (kind, src, dst) == ("resolved", S.ESCALATED, to)
    assert (detail["operator"], detail["reason"], detail["to"]) == (
        "oncall",
        "checked the ledger",
        to.value,
    )
    assert detail.get("evidence") == ("ledger/81" if to is S.SUCCEEDED else None)


def test_resolve_refuses_what_an_honest_resolution_lacks(store: StorePort) -> None:
    after(store, unknown, traits=BLIND_WRITE)  # a write whose outcome is unknown

    def resolve(to: StepState, **proof: Any) -> Any:
        return store.resolve(
            REF, operator="o", reason="r", to=to, traits=BLIND_WRITE, policy=POLICY, now=LATER,
            **proof,
        )  # fmt: skip

    assert unchanged(store, REF, lambda: resolve(S.SUCCEEDED)).code == "EVIDENCE_REQUIRED"
    assert unchanged(store, REF, lambda: resolve(S.FAILED)).code == "NOT_WRITTEN_UNCONFIRMED"
    recorded = resolve(S.FAILED, confirm_not_written=True)
    assert (recorded.step.state, recorded.step.commit_state) == (S.FAILED, "not_committed")
    kind, _, _, detail = last(store)
    assert (kind, detail["confirm_not_written"]) == ("resolved", True)


def test_resolve_re_drives_with_a_fresh_budget(store: StorePort) -> None:
    after(store, escalate)
    recorded = store.resolve(
        REF, operator="oncall", reason="fixed", to=S.PENDING, traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.state is S.PENDING
    assert recorded.step.max_attempts == recorded.step.attempts + POLICY.retry.max_attempts
    claim = store.claim_execution(REF, "worker-2", LEASE, LATER)
    assert claim is not None and claim.step.attempts == 2


def test_resolve_re_drive_of_an_unknown_outcome_verifies_first(store: StorePort) -> None:
    after(store, unknown, traits=BLIND_WRITE)  # no lookup: escalated at once
    step = store.get(REF)
    assert (step.state, step.commit_state) == (S.ESCALATED, "unknown")
    recorded = store.resolve(
        REF,
        operator="oncall",
        reason="lookup added",
        to=S.PENDING,
        traits=WRITE,
        policy=POLICY,
        now=LATER,
    )
    assert (recorded.step.state, recorded.step.commit_state) == (S.VERIFYING, "unknown")
    # The same after a lookup that stayed down escalated it (its due time cleared).
    after(store, unknown, "r2")
    set_columns(store, "r2", state=S.ESCALATED, reason="LOOKUP_UNAVAILABLE", due_at=None)
    recorded = store.resolve(
        "r2", operator="oncall", reason="lookup back", to=S.PENDING, traits=WRITE,
        policy=POLICY, now=LATER,
    )  # fmt: skip
    assert (recorded.step.state, recorded.step.commit_state) == (S.VERIFYING, "unknown")


def test_resolve_refusals(store: StorePort) -> None:
    submit(store, "r1")

    def resolve() -> Any:
        return store.resolve(
            "r1", operator="o", reason="r", to=S.FAILED, traits=WRITE, policy=POLICY, now=LATER
        )

    assert unchanged(store, "r1", resolve).code == "NOT_ESCALATED"
    with pytest.raises(StepNotFound):
        store.resolve(
            "ghost", operator="o", reason="r", to=S.FAILED, traits=WRITE, policy=POLICY, now=LATER
        )


# ------------------------------------------------------------------ a person's decision (issue 29)

BUDGET = POLICY.retry.max_attempts


def _left(store: StorePort, ref: str = REF) -> int:
    """Attempts left as the row counts them; the envelope it shows must say the same."""
    step = store.get(ref)
    assert step.last_envelope is not None
    assert (
        step.last_envelope["retry"]["max_attempts_remaining"] == step.max_attempts - step.attempts
    )
    return step.max_attempts - step.attempts


def test_approve_then_a_rate_limit_keeps_the_tools_budget(store: StorePort) -> None:
    after(store, needs_approval)  # the adapter said: 1 attempt left
    waiting = store.get(REF)
    assert _left(store) == BUDGET  # what the approval will give, said while waiting
    # A row stored before the rule: its limit lowered to the adapter's one attempt.
    set_columns(store, REF, max_attempts=waiting.attempts + 1)
    recorded = store.approve(
        REF, approver="ops@example.com", reason="ok", input_hash=waiting.input_hash,
        traits=WRITE, policy=POLICY, now=LATER,
    )  # fmt: skip
    assert recorded.step.max_attempts == waiting.attempts + BUDGET
    assert last(store)[3]["max_attempts"] == waiting.attempts + BUDGET
    claim = store.claim_execution(REF, "worker-2", LEASE, LATER)
    assert claim is not None
    limited = Executed(retry_later(REF, LATER + MINUTE, remaining=10))
    retried = store.record(claim, limited, traits=WRITE, policy=POLICY, now=LATER, rng=rng())
    assert retried is not None and retried.step.state is S.WAITING_RETRY  # not escalated
    assert _left(store) == BUDGET - 1
    assert store.claim_execution(REF, "worker-3", LEASE, LATER + MINUTE) is not None


def test_corrected_input_then_a_lost_worker_verified_absent_waits_to_retry(
    store: StorePort,
) -> None:
    after(store, correct_input)
    old = store.get(REF)
    assert _left(store) == BUDGET
    fixed = {**old.input, "recipient_email": "billing@example.com"}
    recorded = store.provide_input(
        REF, fixed, validate=valid, traits=WRITE, policy=POLICY, now=LATER
    )
    assert recorded.step.max_attempts == old.attempts + BUDGET
    assert store.claim_execution(REF, "worker-2", LEASE, LATER) is not None
    # The worker dies during the call: its lease runs out, the write is unknown.
    [expired] = store.expire_leases(LATER + LEASE, lambda _: WRITE, lambda _: POLICY, rng=rng())
    assert (expired.step.state, expired.step.commit_state) == (S.VERIFYING, "unknown")
    check_at = max(expired.step.due_at or LATER, LATER + WRITE.consistency_window + MINUTE)
    claim = store.claim_verification(REF, "checker", LEASE, check_at)
    assert claim is not None
    absent = LookedUp(LookupNotFound(checked_at=check_at))
    found = store.record(claim, absent, traits=WRITE, policy=POLICY, now=check_at, rng=rng())
    assert found is not None
    assert (found.step.state, found.step.commit_state) == (S.WAITING_RETRY, "not_committed")
    assert _left(store) == BUDGET - 1
    assert store.claim_execution(REF, "worker-3", LEASE, check_at) is not None


def test_the_loop_guard_still_escalates_refusals_repeated_across_approvals(
    store: StorePort,
) -> None:
    after(store, needs_approval)
    now = LATER
    for _ in range(POLICY.loop_guard - 1):
        step = store.get(REF)
        assert step.state is S.AWAITING_APPROVAL
        store.approve(
            REF, approver="ops", reason="ok", input_hash=step.input_hash,
            traits=WRITE, policy=POLICY, now=now,
        )  # fmt: skip
        claim = store.claim_execution(REF, "worker-2", LEASE, now)
        assert claim is not None
        refused = Executed(needs_approval(REF))
        store.record(claim, refused, traits=WRITE, policy=POLICY, now=now, rng=rng())
        now += MINUTE
    step = store.get(REF)
    assert (step.state, step.reason) == (S.ESCALATED, "LOOP_GUARD")
    assert step.fingerprint_repeats == POLICY.loop_guard
