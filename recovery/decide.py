"""The pure decision function: after every outcome, the next state and what must happen.

DESIGN §5–§6 as code. No I/O, no clock reads; the only randomness is the ``rng`` passed in.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never

from toolsafe.adapters.envelope import AnySuccess, CommitState, ToolError, flagged_fields
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupResult, LookupUnavailable
from toolsafe.recovery import reasons as R
from toolsafe.recovery.backoff import retry_delay, unavailable_delay, verification_delay
from toolsafe.recovery.envelopes import shown_envelope
from toolsafe.recovery.fingerprint import error_fingerprint
from toolsafe.recovery.outcomes import (
    Action,
    Approved,
    Cancelled,
    Decision,
    Executed,
    InputCorrected,
    LeaseExpired,
    LookedUp,
    Outcome,
    Rejected,
    Resolved,
    StepSnapshot,
    TransitionRefused,
)
from toolsafe.recovery.policy import Policy
from toolsafe.recovery.resolution import check_resolution
from toolsafe.recovery.states import ALLOWED, LABELS, WAITING, StepState
from toolsafe.recovery.windows import follows_early_absence, may_still_land, not_found_final_at

S = StepState


class IllegalTransition(ToolsafeError, AssertionError):
    """``decide`` produced an edge the lifecycle does not have: a bug in the runtime."""

    def __init__(self, src: str, dst: str) -> None:
        super().__init__(src, dst)
        self.src = src
        self.dst = dst

    def __str__(self) -> str:
        return f"the lifecycle has no transition {self.src} -> {self.dst}"


def decide(
    step: StepSnapshot, outcome: Outcome, now: datetime, policy: Policy, rng: random.Random
) -> Decision:
    """The Decision for ``outcome`` on ``step``; raises ``TransitionRefused`` when an agent
    or operator action is not allowed, or a worker's outcome is stale.

    The Decision carries the envelope the model sees in the new state
    (``toolsafe.recovery.envelopes``), which agrees with it.
    """
    decision = _decide(step, outcome, now, policy, rng)
    if (step.state, decision.state) not in ALLOWED:
        raise IllegalTransition(step.state, decision.state)
    return replace(decision, envelope=shown_envelope(step, outcome, decision, now))


def _decide(
    step: StepSnapshot, outcome: Outcome, now: datetime, policy: Policy, rng: random.Random
) -> Decision:
    if isinstance(outcome, Executed):
        return _executed(step, outcome.envelope, now, policy, rng)
    if isinstance(outcome, LookedUp):
        return _looked_up(step, outcome.result, now, policy, rng)
    if isinstance(outcome, LeaseExpired):
        return _lease_expired(step, now, policy, rng)
    if isinstance(outcome, InputCorrected):
        return _input_corrected(step, outcome, now, policy)
    if isinstance(outcome, Approved):
        return _approved(step, outcome, now, policy)
    if isinstance(outcome, Rejected):
        _require(step, S.AWAITING_APPROVAL, R.NOT_AWAITING_APPROVAL, "rejected")
        extra = {"approver": outcome.approver, "reason": outcome.reason}
        return _to(step, S.FAILED, "fail", step.commit_state, reason=R.REJECTED, extra=extra)
    if isinstance(outcome, Cancelled):
        if step.state not in WAITING:
            raise TransitionRefused(
                R.NOT_CANCELLABLE,
                f"step {step.operation_ref} is {step.state}; only a waiting step "
                f"({', '.join(sorted(WAITING))}) can be cancelled",
            )
        if step.commit_state == "unknown":
            # The downstream may hold the write: a cancelled step would leave it orphaned
            # and unreported. Verification (bounded) or an operator settles it first.
            raise TransitionRefused(
                R.UNKNOWN_NOT_CANCELLABLE,
                f"step {step.operation_ref} may already have written downstream (outcome "
                "unknown, being verified); wait for verification or ask an operator to resolve",
            )
        if step.state is S.WAITING_RETRY and may_still_land(step, now):
            raise TransitionRefused(
                R.UNKNOWN_NOT_CANCELLABLE,
                f"step {step.operation_ref} was found absent while its killed request may "
                "still reach the downstream; the retry under the same operation_ref settles "
                "it: cancel after that",
            )
        extra = {"by": outcome.by, "reason": outcome.reason}
        # Never executed (None) or provably not written: a cancelled step wrote nothing.
        committed = step.commit_state or "not_committed"
        return _to(step, S.CANCELLED, "cancel", committed, reason=R.CANCELLED, extra=extra)
    if isinstance(outcome, Resolved):
        return _resolved(step, outcome, now, policy)
    assert_never(outcome)


# ---------------------------------------------------------------------- building blocks


def _to(
    step: StepSnapshot, dst: StepState, action: Action, commit_state: CommitState | None, **kw: Any
) -> Decision:
    label = LABELS.get((step.state, dst))
    if label is None:
        raise IllegalTransition(step.state, dst)
    return Decision(state=dst, action=action, label=label, commit_state=commit_state, **kw)


def _escalate(
    step: StepSnapshot, reason: str, commit_state: CommitState | None, **kw: Any
) -> Decision:
    return _to(step, S.ESCALATED, "escalate", commit_state, reason=reason, **kw)


def _require(step: StepSnapshot, state: StepState, code: str, what: str) -> None:
    if step.state is not state:
        raise TransitionRefused(
            code, f"step {step.operation_ref} is {step.state}, not {state}: it cannot be {what}"
        )


def _stale(step: StepSnapshot, what: str, expected: str) -> TransitionRefused:
    return TransitionRefused(
        R.STALE_OUTCOME,
        f"{what} arrived for step {step.operation_ref} in state {step.state}; "
        f"it applies only to {expected} (a late or duplicate delivery)",
    )


def _attempts_left(step: StepSnapshot) -> int:
    return step.max_attempts - step.attempts


def fresh_budget(step: StepSnapshot, policy: Policy) -> dict[str, Any]:
    """The tool's whole budget of executions again, counted from now: what a person's
    decision gives a step (an operator's re-drive, an approval, a corrected input
    accepted). Attempts already made stay counted; the loop guard is not touched here
    (a re-drive resets it itself, an approval or a correction does not)."""
    return {"max_attempts": step.attempts + policy.retry.max_attempts}


def _verify_unknown(
    step: StepSnapshot, now: datetime, policy: Policy, rng: random.Random, **kw: Any
) -> Decision:
    """The write may have happened: look it up before anything else (or escalate)."""
    if not step.traits.has_lookup:
        return _escalate(step, R.UNVERIFIABLE_UNKNOWN, "unknown", **kw)
    return _to(
        step,
        S.VERIFYING,
        "verify",
        "unknown",
        due_at=now + verification_delay(policy, 0, rng),
        verification_attempts=0,
        lookups_unavailable=0,
        **kw,
    )


# ---------------------------------------------------------------------- worker outcomes


def _executed(
    step: StepSnapshot,
    envelope: AnySuccess | ToolError,
    now: datetime,
    policy: Policy,
    rng: random.Random,
) -> Decision:
    if step.state is not S.IN_FLIGHT:
        raise _stale(step, "an execution result", "an in_flight step")
    if envelope.operation_ref != step.operation_ref:
        # An answer for another operation is a contract break: this call's effect is
        # not known, so a write is treated as unknown and a read changed nothing.
        if step.traits.writes:
            return _verify_unknown(step, now, policy, rng)
        return _escalate(step, R.OPERATION_REF_MISMATCH, "not_committed")
    if isinstance(envelope, ToolError):
        return _tool_error(step, envelope, now, policy, rng)
    return _to(
        step,
        S.SUCCEEDED,
        "succeed",
        "committed",
        evidence_ref=envelope.verification.evidence_ref,
    )


def _tool_error(
    step: StepSnapshot, envelope: ToolError, now: datetime, policy: Policy, rng: random.Random
) -> Decision:
    fingerprint = error_fingerprint(envelope, step.input_hash)
    repeats = step.fingerprint_repeats + 1 if fingerprint == step.fingerprint else 1
    loop: dict[str, Any] = {"fingerprint": fingerprint, "fingerprint_repeats": repeats}
    next_action = envelope.next_action
    # DESIGN §7: a read changes nothing downstream, so every dependency failure of a
    # read may be retried, whatever the adapter's directive.
    read_retry = (
        not step.traits.writes
        and envelope.category == "dependency"
        and envelope.commit_state == "not_committed"
        and next_action in ("wait_and_retry", "verify_operation", "escalate")
    )

    # `unknown` beats everything: never executed again before verification. Checked
    # before the envelope's counts, whose `never`/0 means "not without verification".
    if envelope.commit_state == "unknown" or (next_action == "verify_operation" and not read_retry):
        return _verify_unknown(step, now, policy, rng, **loop)
    # A step that ends here says whether it was written. After an early "not found" on a
    # deduplicating downstream, this attempt's refusal does not prove that: the killed
    # attempt's request may still land, so the escalation says "unknown" and an operator
    # checks (``recovery/windows.py``).
    ended = "unknown" if follows_early_absence(step, now) else envelope.commit_state
    if next_action == "escalate" and not read_retry:
        return _escalate(step, envelope.code, ended, **loop)
    if repeats >= policy.loop_guard:
        return _escalate(step, R.LOOP_GUARD, ended, **loop)

    remaining = envelope.retry.max_attempts_remaining
    if read_retry and envelope.retry.directive == "never":
        remaining = step.max_attempts - step.attempts
    # The runtime trusts its own counts: the envelope may only lower the limit.
    limit = min(step.max_attempts, step.attempts + remaining)
    counts = {"max_attempts": limit, **loop}
    if limit - step.attempts <= 0:
        return _escalate(step, R.ATTEMPTS_EXHAUSTED, ended, **counts)

    # Waiting on a person: the envelope's count allowed the corrected or approved call
    # (none left escalated above); the person's decision then gives the tool's whole
    # budget again (``fresh_budget``), and the step says so while it waits — a rate
    # limit or a lost worker after the decision does not spend it.
    if next_action == "correct_input":
        return _to(
            step,
            S.NEEDS_INPUT,
            "wait_input",
            envelope.commit_state,
            fields=flagged_fields(envelope),
            **{**counts, **fresh_budget(step, policy)},
        )
    if next_action == "request_approval":
        return _to(
            step,
            S.AWAITING_APPROVAL,
            "wait_approval",
            envelope.commit_state,
            approval_input_hash=step.input_hash,
            **{**counts, **fresh_budget(step, policy)},
        )
    # wait_and_retry, or a read's dependency failure.
    not_before = envelope.retry.not_before
    if not_before is not None and not_before - now > policy.retry.longest_wait:
        return _escalate(step, R.NOT_BEFORE_TOO_FAR, ended, **counts)
    due_at = now + retry_delay(policy, step.attempts, rng)
    if not_before is not None and not_before > due_at:
        due_at = not_before
    return _to(step, S.WAITING_RETRY, "run", "not_committed", due_at=due_at, **counts)


def _looked_up(
    step: StepSnapshot, result: LookupResult, now: datetime, policy: Policy, rng: random.Random
) -> Decision:
    if step.state is not S.VERIFYING:
        raise _stale(step, "a lookup result", "a verifying step")
    if not step.traits.has_lookup:
        return _escalate(step, R.NO_LOOKUP, step.commit_state)
    if isinstance(result, LookupFound):
        return _to(step, S.SUCCEEDED, "succeed", "committed", evidence_ref=result.evidence_ref)
    if isinstance(result, LookupNotFound):
        window_end = not_found_final_at(step)
        if window_end is not None and now < window_end:
            # The downstream may not show the write yet: look again, never execute.
            tries = step.verification_attempts + 1
            due_at = now + verification_delay(policy, tries, rng)
            if step.traits.longest_call or step.traits.deduplicates_by_key:
                due_at = min(due_at, window_end)  # the final look when it is final
            return _to(
                step,
                S.VERIFYING,
                "verify",
                step.commit_state,
                due_at=due_at,
                verification_attempts=tries,
                lookups_unavailable=0,
            )
        # Not found after the window: the write provably did not happen.
        reset: dict[str, Any] = {"verification_attempts": 0, "lookups_unavailable": 0}
        if _attempts_left(step) <= 0:
            return _escalate(step, R.ATTEMPTS_EXHAUSTED, "not_committed", **reset)
        return _to(step, S.WAITING_RETRY, "run", "not_committed", due_at=now, **reset)
    if isinstance(result, LookupUnavailable):
        return _lookup_unavailable(step, result, now, policy, rng)
    assert_never(result)


def _lookup_unavailable(
    step: StepSnapshot,
    result: LookupUnavailable,
    now: datetime,
    policy: Policy,
    rng: random.Random,
) -> Decision:
    """Look again later, within the verification's time budget (counted from the send
    of the write); escalate only once the budget is spent and the lookup was unavailable
    ``max_unavailable`` times in a row. A short outage of the lookup is outlasted."""
    verification = policy.verification
    unavailable = step.lookups_unavailable + 1
    deadline = None if step.last_sent_at is None else step.last_sent_at + verification.budget
    enough = unavailable >= verification.max_unavailable
    if enough and (deadline is None or now >= deadline):
        return _escalate(
            step, R.LOOKUP_UNAVAILABLE, step.commit_state, lookups_unavailable=unavailable
        )
    due_at = now + unavailable_delay(policy, unavailable, result.retry_after, rng)
    if deadline is not None and now < deadline:
        # The last look falls on the deadline, never after it: a Retry-After longer than
        # what is left of the budget is honoured only that far.
        due_at = min(due_at, deadline)
    return _to(
        step,
        S.VERIFYING,
        "verify",
        step.commit_state,
        due_at=due_at,
        lookups_unavailable=unavailable,
    )


def _lease_expired(
    step: StepSnapshot, now: datetime, policy: Policy, rng: random.Random
) -> Decision:
    if step.state is S.VERIFYING:
        # A verification worker died: a lookup writes nothing, so just look again now.
        return _to(step, S.VERIFYING, "verify", step.commit_state, due_at=now)
    if step.state is not S.IN_FLIGHT:
        raise _stale(step, "a lease expiry", "an in_flight or verifying step")
    if step.traits.writes:
        return _verify_unknown(step, now, policy, rng)  # R4
    if _attempts_left(step) <= 0:
        return _escalate(step, R.ATTEMPTS_EXHAUSTED, "not_committed")
    return _to(step, S.WAITING_RETRY, "run", "not_committed", due_at=now)


# ---------------------------------------------------------------------- agent and operator


def _input_corrected(
    step: StepSnapshot, outcome: InputCorrected, now: datetime, policy: Policy
) -> Decision:
    """needs_input → pending with the new input, and the tool's whole budget again
    (``fresh_budget``); identical input, an unchanged flagged field or input that fails
    validation is refused. The loop guard's count stays (the new input hash makes the
    next error's fingerprint a new one anyway)."""
    _require(step, S.NEEDS_INPUT, R.NOT_NEEDS_INPUT, "given corrected input")
    if outcome.new_input_hash == step.input_hash:
        raise TransitionRefused(
            R.IDENTICAL_INPUT,
            "the corrected input is identical to the input that failed; change "
            + (", ".join(step.flagged_fields) or "the input")
            + " before sending it again",
        )
    unchanged = sorted(set(step.flagged_fields) - outcome.changed_fields)
    if unchanged:
        raise TransitionRefused(
            R.FLAGGED_FIELD_UNCHANGED,
            f"the error flagged {', '.join(unchanged)}, which did not change",
        )
    if outcome.field_errors:
        named = ", ".join(f"{error.field} ({error.code})" for error in outcome.field_errors)
        raise TransitionRefused(
            R.CORRECTED_INPUT_INVALID, f"the corrected input fails validation: {named}"
        )
    return _to(
        step,
        S.PENDING,
        "run",
        step.commit_state,
        due_at=now,
        input_hash=outcome.new_input_hash,
        **fresh_budget(step, policy),
    )


def _approved(step: StepSnapshot, outcome: Approved, now: datetime, policy: Policy) -> Decision:
    """awaiting_approval → pending for the input the approval was asked for, with the
    tool's whole budget again (``fresh_budget``); the loop guard's count stays, so the
    same refusal again and again after approvals still escalates ``LOOP_GUARD``."""
    _require(step, S.AWAITING_APPROVAL, R.NOT_AWAITING_APPROVAL, "approved")
    if outcome.input_hash != step.approval_input_hash or outcome.input_hash != step.input_hash:
        raise TransitionRefused(
            R.APPROVAL_INPUT_MISMATCH,
            f"the approval is for input {outcome.input_hash}, but approval was requested "
            f"for input {step.approval_input_hash}",
        )
    extra = {"approver": outcome.approver, "reason": outcome.reason}
    return _to(
        step,
        S.PENDING,
        "run",
        step.commit_state,
        due_at=now,
        extra=extra,
        **fresh_budget(step, policy),
    )


def _resolved(step: StepSnapshot, outcome: Resolved, now: datetime, policy: Policy) -> Decision:
    _require(step, S.ESCALATED, R.NOT_ESCALATED, "resolved")
    check_resolution(step, outcome)
    extra: dict[str, str | bool] = {"operator": outcome.operator, "reason": outcome.reason}
    if outcome.evidence is not None and outcome.evidence.strip():
        extra["evidence"] = outcome.evidence.strip()
    if outcome.to is S.SUCCEEDED:
        # The operator's downstream reference is the evidence (checked by hand, not by a
        # lookup): the envelope and the view say so.
        return _to(
            step,
            S.SUCCEEDED,
            "succeed",
            "committed",
            reason=R.OPERATOR_RESOLVED,
            evidence_ref=extra["evidence"],
            extra=extra,
        )
    if outcome.to is S.FAILED:
        commit: CommitState | None = step.commit_state
        if outcome.confirm_not_written:
            # The operator checked the downstream and states the write did not happen.
            extra["confirm_not_written"] = True
            commit = "not_committed"
        return _to(step, S.FAILED, "fail", commit, reason=R.OPERATOR_RESOLVED, extra=extra)
    if outcome.to is not S.PENDING:
        raise TransitionRefused(
            R.INVALID_RESOLUTION,
            f"an escalated step resolves to pending, succeeded or failed, not {outcome.to}",
        )
    # A re-drive gets a fresh budget of executions and a fresh loop guard.
    fresh: dict[str, Any] = {
        **fresh_budget(step, policy),
        "fingerprint_repeats": 0,
        "extra": extra,
    }
    if step.commit_state == "unknown":
        if not step.traits.has_lookup:
            raise TransitionRefused(
                R.REDRIVE_UNVERIFIABLE,
                f"the outcome of {step.operation_ref} is unknown and tool {step.tool} has no "
                "lookup; check the downstream and resolve to succeeded or failed",
            )
        return _to(
            step,
            S.VERIFYING,
            "verify",
            "unknown",
            due_at=now,
            verification_attempts=0,
            lookups_unavailable=0,
            **fresh,
        )
    return _to(step, S.PENDING, "run", step.commit_state, due_at=now, **fresh)
