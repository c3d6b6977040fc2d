"""Random sequences of outcomes through a tiny stand-in for the store.

The driver claims like the store does (attempt + 1 at the claim, refused when the step is
not due or its attempts are spent) and writes each Decision's fields as they are. It also
keeps the downstream's truth — did any execution write? — and generates envelopes and
lookup answers that are honest about it, so the checks can compare the runtime's beliefs
with what really happened.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from toolsafe.adapters.envelope import (
    CATEGORIES,
    NEXT_ACTIONS,
    CommitState,
    Directive,
    NextAction,
    Retry,
    ToolError,
    ToolSuccess,
    Verification,
)
from toolsafe.adapters.protocol import FieldError, LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.recovery import reasons
from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import (
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
from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits, VerificationPolicy
from toolsafe.recovery.states import ALLOWED, TERMINAL, WAITING_ON_HUMAN, StepState

S = StepState
REF = "run_81/step_4"
START = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
FIRST_HASH = "sha256:" + "0" * 64


def _valid_shapes() -> list[tuple[CommitState, Directive, NextAction]]:
    """Every (commit_state, directive, next_action) the envelope contract accepts."""
    shapes: list[tuple[CommitState, Directive, NextAction]] = []
    for commit_state, directive, next_action in itertools.product(
        get_args(CommitState), get_args(Directive), get_args(NextAction)
    ):
        try:
            ToolError(
                code="PROBE",
                category="internal",
                commit_state=commit_state,
                retry=Retry(
                    directive=directive,
                    not_before=START if directive == "after_delay" else None,
                    max_attempts_remaining=1,
                ),
                next_action=next_action,
                operation_ref=REF,
                agent_message="probe",
                user_message="probe",
            )
        except ValidationError:
            continue
        shapes.append((commit_state, directive, next_action))
    return shapes


SHAPES = _valid_shapes()
Draw = Callable[..., Any]  # hypothesis' draw, from @composite or from st.data()

# What each state usually sees next; any outcome may still arrive (late or duplicate).
KINDS = (
    "claim",
    "executed",
    "looked_up",
    "lease_expired",
    "input",
    "approve",
    "reject",
    "cancel",
    "resolve",
)
LIKELY: dict[StepState, tuple[str, ...]] = {
    S.PENDING: ("claim",) * 9 + ("cancel",),
    S.WAITING_RETRY: ("claim",) * 9 + ("cancel",),
    S.IN_FLIGHT: ("executed",) * 4 + ("lease_expired",),
    S.VERIFYING: ("looked_up",) * 6 + ("lease_expired", "cancel"),
    S.NEEDS_INPUT: ("input",) * 4 + ("cancel",),
    S.AWAITING_APPROVAL: ("approve",) * 3 + ("reject", "cancel"),
    S.ESCALATED: ("resolve",),
}
PERSON = WAITING_ON_HUMAN  # a person's decision there gives the tool's whole budget again
WORKER_STATES: dict[type, frozenset[StepState]] = {
    Executed: frozenset({S.IN_FLIGHT}),
    LookedUp: frozenset({S.VERIFYING}),
    LeaseExpired: frozenset({S.IN_FLIGHT, S.VERIFYING}),
}
ACTION_STATES: dict[str, frozenset[StepState]] = {
    "run": frozenset({S.PENDING, S.WAITING_RETRY}),
    "verify": frozenset({S.VERIFYING}),
    "wait_input": frozenset({S.NEEDS_INPUT}),
    "wait_approval": frozenset({S.AWAITING_APPROVAL}),
    "escalate": frozenset({S.ESCALATED}),
    "succeed": frozenset({S.SUCCEEDED}),
    "fail": frozenset({S.FAILED}),
    "cancel": frozenset({S.CANCELLED}),
}


@dataclass
class World:
    """The step as the store holds it, plus the downstream's truth."""

    step: StepSnapshot
    policy: Policy
    now: datetime
    budget: int  # the limit the policy (or a person's decision) last granted
    written: bool = False  # the downstream holds the operation (writes only)
    unsettled: bool = False  # an unknown outcome not yet settled by a lookup
    hashes: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    trail: list[tuple[StepState, StepState]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return self.step.traits.writes

    def claim(self) -> None:
        step = self.step
        if step.state not in (S.PENDING, S.WAITING_RETRY) or step.attempts >= step.max_attempts:
            return  # the store's claim updates zero rows
        # The message is delivered when due (R6); a worker never runs a step early.
        self.now = max(self.now, step.due_at or self.now)
        # THE property: no execution while an unknown outcome is unsettled, and for a
        # write, never a second execution once the downstream holds the operation.
        assert not self.unsettled, "executed again before verification"
        assert step.commit_state != "unknown"
        if self.writes:
            assert not self.written, "duplicate write"
        self.trail.append((step.state, S.IN_FLIGHT))
        self.step = replace(
            step,
            state=S.IN_FLIGHT,
            attempts=step.attempts + 1,
            last_sent_at=self.now,
            due_at=None,
        )
        assert self.step.attempts <= self.step.max_attempts

    def apply(self, outcome: Outcome, rng: random.Random) -> Decision | None:
        before = self.step
        applicable = WORKER_STATES.get(type(outcome))
        try:
            decision = decide(before, outcome, self.now, self.policy, rng)
        except TransitionRefused as refused:
            if applicable is not None:
                assert before.state not in applicable
                assert refused.code == reasons.STALE_OUTCOME
            else:
                assert refused.code in reasons.REFUSALS
            return None
        if applicable is not None:
            assert before.state in applicable
        self._check(before, outcome, decision)
        self._write(decision)
        return decision

    def _check(self, before: StepSnapshot, outcome: Outcome, decision: Decision) -> None:
        assert (before.state, decision.state) in ALLOWED
        assert decision.state in ACTION_STATES[decision.action]
        if decision.action in ("run", "verify"):
            assert decision.due_at is not None and decision.due_at >= self.now
            # Nothing waits longer than the policy allows; a not_before beyond it escalates.
            longest = max(self.policy.retry.longest_wait, self.policy.retry.max_delay)
            assert decision.due_at - self.now <= longest
        if decision.state in (S.ESCALATED, S.FAILED):
            assert decision.reason
        if isinstance(outcome, Executed) and isinstance(outcome.envelope, ToolError):
            assert decision.fingerprint is not None and decision.fingerprint_repeats
            envelope = outcome.envelope
            read_override = (
                not self.writes
                and envelope.category == "dependency"
                and envelope.retry.directive == "never"
            )
            remaining = envelope.retry.max_attempts_remaining
            if decision.state in PERSON:
                # The envelope allowed the corrected or approved call; the person's
                # decision will give the tool's whole budget again, and the step says so.
                assert remaining >= 1 and before.attempts < before.max_attempts
                assert decision.max_attempts == before.attempts + self.policy.retry.max_attempts
            elif decision.max_attempts is not None and not read_override:
                # attempts left = min(policy, envelope)
                assert decision.max_attempts <= before.attempts + remaining
            if envelope.commit_state == "unknown":
                assert decision.state in (S.VERIFYING, S.ESCALATED)
            if decision.state is S.WAITING_RETRY and envelope.not_before is not None:
                assert decision.due_at is not None and decision.due_at >= envelope.not_before
        if isinstance(outcome, Approved | InputCorrected | Resolved) and decision.state in (
            S.PENDING,
            S.VERIFYING,
        ):
            # A person's decision: the tool's whole budget again, counted from now.
            assert decision.max_attempts == before.attempts + self.policy.retry.max_attempts
        if self.writes and decision.commit_state == "not_committed":
            assert not self.written, "a write that happened was recorded as not committed"
        if (
            self.writes
            and decision.commit_state == "committed"
            and not isinstance(outcome, Resolved)
        ):
            assert self.written, "a success that did not happen"

    def _write(self, decision: Decision) -> None:
        step = self.step
        changes: dict[str, Any] = {
            "state": decision.state,
            "commit_state": decision.commit_state,
            "due_at": decision.due_at,
        }
        for name in (
            "max_attempts",
            "verification_attempts",
            "lookups_unavailable",
            "fingerprint",
            "fingerprint_repeats",
            "input_hash",
            "approval_input_hash",
        ):
            value = getattr(decision, name)
            if value is not None:
                changes[name] = value
        if decision.state is S.NEEDS_INPUT:
            changes["flagged_fields"] = decision.fields
        if decision.max_attempts is not None and (
            step.state in PERSON | {S.ESCALATED} or decision.state in PERSON
        ):
            # Only a person grants a new budget: an operator's re-drive, an approval or
            # a corrected input (announced while the step waits for it).
            self.budget = decision.max_attempts
        self.trail.append((step.state, decision.state))
        self.step = replace(step, **changes)
        if decision.commit_state == "unknown":
            self.unsettled = True
        elif decision.commit_state in ("committed", "not_committed"):
            self.unsettled = False
        after = self.step
        assert after.attempts <= after.max_attempts <= self.budget
        if after.state in (S.PENDING, S.WAITING_RETRY):
            # A step waiting to run can run: nothing is left stuck without attempts.
            assert after.attempts < after.max_attempts

    def inside_window(self) -> bool:
        sent = self.step.last_sent_at
        return sent is not None and self.now < sent + self.step.traits.consistency_window


# ---------------------------------------------------------------------- strategies


@st.composite
def tool_errors(draw: st.DrawFn, world: World) -> ToolError:
    # Pick the next_action first so that each of the five is equally likely.
    wanted = draw(st.sampled_from(NEXT_ACTIONS))
    commit_state, directive, next_action = draw(
        st.sampled_from([shape for shape in SHAPES if shape[2] == wanted])
    )
    not_before = None
    if directive == "after_delay":
        offset = draw(st.sampled_from([-60, 0, 2, 90, 3600, 2 * 86400]))
        not_before = world.now + timedelta(seconds=offset)
    low = 1 if next_action == "wait_and_retry" else 0
    field_name = draw(st.sampled_from(["recipient_email", "amount", "recipient_email, amount"]))
    return ToolError(
        code=draw(
            st.sampled_from(["INVALID_RECIPIENT_ADDRESS", "RATE_LIMITED", "OUTCOME_UNKNOWN"])
        ),
        category=draw(st.sampled_from(CATEGORIES)),
        commit_state=commit_state,
        retry=Retry(
            directive=directive,
            not_before=not_before,
            max_attempts_remaining=draw(st.integers(low, 3)),
        ),
        next_action=next_action,
        operation_ref=REF,
        safe_details={"fields": field_name} if draw(st.booleans()) else {},
        agent_message="The tool failed.",
        user_message="The action did not complete.",
    )


def execute(draw: Draw, world: World) -> Outcome:
    """An execution result, and what it really did downstream."""
    kind = draw(st.sampled_from(["error"] * 6 + ["success", "success", "other_ref"]))
    if kind == "error":
        envelope = draw(tool_errors(world))
        if envelope.commit_state == "unknown" and world.step.state is S.IN_FLIGHT:
            world.written |= draw(st.booleans())
        return Executed(envelope)
    ref = REF if kind == "success" else "run_81/step_9"
    if world.step.state is S.IN_FLIGHT:
        # A success wrote; an answer for another operation may or may not have.
        world.written |= kind == "success" or draw(st.booleans())
    return Executed(
        ToolSuccess[Any](
            operation_ref=ref,
            result={"invoice_id": "INV-1"},
            verification=Verification(checked_at=world.now, evidence_ref="invoice/INV-1"),
        )
    )


def look_up(draw: Draw, world: World) -> Outcome:
    """A lookup answer consistent with the downstream's truth and its consistency window."""
    now = world.now
    found = LookupFound(checked_at=now, result={"id": "INV-1"}, evidence_ref="invoice/INV-1")
    unavailable = LookupUnavailable(checked_at=now)
    not_found = LookupNotFound(checked_at=now)
    if not world.writes:
        options: list[Any] = [found, not_found, unavailable]
    elif world.written:
        # Inside the window the downstream may not show the write yet.
        options = ([not_found] if world.inside_window() else []) + [found, unavailable]
    else:
        options = [not_found, unavailable]
    return LookedUp(draw(st.sampled_from(options)))


def correct(draw: Draw, world: World) -> Outcome:
    step = world.step
    kind = draw(st.sampled_from(["valid", "valid", "valid", "identical", "unchanged", "invalid"]))
    new_hash = f"sha256:{next(world.hashes):064d}"
    flagged = frozenset(step.flagged_fields)
    if kind == "identical":
        return InputCorrected(new_input_hash=step.input_hash, changed_fields=frozenset())
    if kind == "unchanged":
        return InputCorrected(new_input_hash=new_hash, changed_fields=frozenset({"other"}))
    errors = (FieldError("recipient_email", "INVALID_EMAIL"),) if kind == "invalid" else ()
    return InputCorrected(new_input_hash=new_hash, changed_fields=flagged, field_errors=errors)


def next_outcome(draw: Draw, world: World) -> Outcome | None:
    """None stands for a claim attempt."""
    state = world.step.state
    likely = LIKELY.get(state, KINDS)
    kind = draw(st.sampled_from(likely if draw(st.integers(0, 19)) < 18 else KINDS))
    world.now += timedelta(seconds=draw(st.sampled_from([0, 0, 0.3, 2, 12, 45, 900])))
    if kind == "claim":
        return None
    if kind == "executed":
        return execute(draw, world)
    if kind == "looked_up":
        return look_up(draw, world)
    if kind == "lease_expired":
        if world.writes and state is S.IN_FLIGHT:
            world.written |= draw(st.booleans())  # the worker died before or after writing
        return LeaseExpired()
    if kind == "input":
        return correct(draw, world)
    if kind == "approve":
        good = world.step.approval_input_hash or world.step.input_hash
        input_hash = draw(st.sampled_from([good, good, FIRST_HASH + "x"]))
        return Approved(approver="ops", reason="checked", input_hash=input_hash)
    if kind == "reject":
        return Rejected(approver="ops", reason="no")
    if kind == "cancel":
        return Cancelled(by="agent", reason="user gave up")
    to = draw(st.sampled_from([S.PENDING] * 6 + [S.SUCCEEDED, S.FAILED, *S]))
    return Resolved(operator="op", reason="looked into it", to=to)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    max_attempts = draw(st.integers(1, 4))
    policy = Policy(
        retry=RetryPolicy(max_attempts=max_attempts, longest_wait=timedelta(days=1)),
        verification=VerificationPolicy(max_unavailable=draw(st.integers(1, 3))),
        loop_guard=draw(st.sampled_from([1, 2, 3, 3, 4])),
    )
    traits = ToolTraits(
        writes=draw(st.booleans()),
        has_lookup=draw(st.booleans()),
        consistency_window=timedelta(seconds=draw(st.sampled_from([0, 30, 3600]))),
    )
    step = StepSnapshot(
        operation_ref=REF,
        tool="create_invoice",
        traits=traits,
        state=S.PENDING,
        commit_state=None,
        attempts=0,
        max_attempts=max_attempts,
        verification_attempts=0,
        lookups_unavailable=0,
        input_hash=FIRST_HASH,
        last_sent_at=None,
        fingerprint=None,
        fingerprint_repeats=0,
        due_at=START,
    )
    return World(step=step, policy=policy, now=START, budget=max_attempts)


# ---------------------------------------------------------------------- the properties


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_sequence_of_outcomes_keeps_the_invariants(
    world: World, data: st.DataObject, seed: int
) -> None:
    rng = random.Random(seed)
    for _ in range(data.draw(st.integers(1, 40), label="length")):
        if world.step.state in TERMINAL - {S.ESCALATED}:
            break
        outcome = next_outcome(data.draw, world)
        if outcome is None:
            world.claim()
        else:
            world.apply(outcome, rng)
    final = world.step.state
    # Only the table's transitions happened; claims only from a state waiting to run.
    assert all(edge in ALLOWED for edge in world.trail if edge[1] is not S.IN_FLIGHT)
    claimed_from = {src for src, dst in world.trail if dst is S.IN_FLIGHT}
    assert claimed_from <= {S.PENDING, S.WAITING_RETRY}
    # Attempts never exceed the highest limit ever granted.
    executions = sum(1 for _, dst in world.trail if dst is S.IN_FLIGHT)
    assert world.step.attempts <= world.budget
    assert executions <= world.budget
    # The final state agrees with the downstream's truth (an operator's word aside).
    resolved = any(src is S.ESCALATED for src, _ in world.trail)
    if world.writes and not resolved:
        if final is S.SUCCEEDED:
            assert world.written, "a success that did not happen"
        if world.written:
            assert world.step.commit_state in ("committed", "unknown")
    if world.unsettled and not resolved:
        # An unknown outcome still unsettled is being verified or was escalated.
        assert final in (S.VERIFYING, S.ESCALATED, S.IN_FLIGHT)
    if final in TERMINAL - {S.ESCALATED}:
        # Nothing but refusals after a final state: a late result changes nothing.
        for late in (Executed(_late_success(world)), LookedUp(LookupNotFound(world.now))):
            assert world.apply(late, rng) is None
        assert world.step.state is final


def _late_success(world: World) -> ToolSuccess[Any]:
    return ToolSuccess[Any](
        operation_ref=REF,
        result=None,
        verification=Verification(checked_at=world.now),
    )


def test_the_generator_covers_every_valid_envelope_shape() -> None:
    next_actions = {shape[2] for shape in SHAPES}
    assert next_actions == set(NEXT_ACTIONS)
    assert ("unknown", "never", "verify_operation") in SHAPES
    assert ("unknown", "never", "escalate") in SHAPES
    assert ("not_committed", "after_delay", "wait_and_retry") in SHAPES
    assert ("not_committed", "after_input_fix", "correct_input") in SHAPES
    # unknown with any directive but `never` breaks the contract, so it is never generated.
    assert all(shape[1] == "never" for shape in SHAPES if shape[0] == "unknown")
