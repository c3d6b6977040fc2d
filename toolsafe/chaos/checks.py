"""The chaos run's checks of the store against itself, step by step: executions against
the tool's attempt limit, and the envelope the model sees against the step's state
(DESIGN §6: every state has an envelope that agrees with it). Pure: no I/O here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolsafe.adapters import codes
from toolsafe.chaos.plan import Verdict, Violation
from toolsafe.recovery import reasons
from toolsafe.recovery.records import EventRecord, StepRecord
from toolsafe.recovery.states import NO_OUTCOME_YET, REDRIVEN, WAITING_ON_HUMAN, StepState

S = StepState


@dataclass(frozen=True)
class StepFacts:
    """What the checks read of one step at the end of a run."""

    operation_ref: str
    state: StepState
    commit_state: str | None
    attempts: int  # the row's count of executions
    max_attempts: int  # the step's own limit: min(policy, what envelopes allowed)
    policy_limit: int  # the tool's attempt limit (its policy)
    executions: int  # execution claims in the step's events
    reason: str | None
    envelope: Mapping[str, Any] | None  # the envelope the model sees now
    # Executions before the last person's decision (an approval, a corrected input, an
    # operator's re-drive, or the request for one): the policy's budget counts from there.
    granted_at: int = 0

    @classmethod
    def of(cls, step: StepRecord, events: Iterable[EventRecord], policy_limit: int) -> StepFacts:
        executions = granted_at = 0
        for event in events:
            if event.kind == "claimed" and event.detail.get("claim") == "execute":
                executions += 1
            elif _grants_a_budget(event):
                granted_at = executions
        return cls(
            operation_ref=step.operation_ref,
            state=step.state,
            commit_state=step.commit_state,
            attempts=step.attempts,
            max_attempts=step.max_attempts,
            policy_limit=policy_limit,
            executions=executions,
            reason=step.reason,
            envelope=step.last_envelope,
            granted_at=granted_at,
        )


def _grants_a_budget(event: EventRecord) -> bool:
    """A person's decision gives the tool's whole budget again (``decide.fresh_budget``):
    announced when the step starts waiting on a person, given by the approval, the
    corrected input or the operator's re-drive."""
    if event.to_state in WAITING_ON_HUMAN or event.kind in ("approved", "input_provided"):
        return True
    return event.kind == "resolved" and event.to_state in REDRIVEN


def check_attempts(step: StepFacts) -> list[Violation]:
    """No step executed more often than its policy allows (counted from the last
    person's decision, which gives the whole budget again), every execution was counted,
    and a step escalated for exhausted attempts used exactly its limit."""
    ref, found = step.operation_ref, []
    allowed = step.policy_limit + step.granted_at
    if step.attempts > step.max_attempts or step.max_attempts > allowed:
        found.append(
            Violation(
                ref,
                "attempts_over_limit",
                f"{step.attempts} attempts, step limit {step.max_attempts}, "
                f"policy limit {step.policy_limit}"
                + (f" from attempt {step.granted_at}" if step.granted_at else ""),
            )
        )
    if step.executions != step.attempts:
        found.append(
            Violation(
                ref,
                "attempts_miscounted",
                f"{step.executions} execution claims in the events, {step.attempts} counted",
            )
        )
    if (
        step.state is S.ESCALATED
        and step.reason == reasons.ATTEMPTS_EXHAUSTED
        and step.attempts != step.max_attempts
    ):
        found.append(
            Violation(
                ref,
                "exhausted_below_limit",
                f"escalated {reasons.ATTEMPTS_EXHAUSTED} after {step.attempts} of "
                f"{step.max_attempts} attempts",
            )
        )
    return found


def _retry(envelope: Mapping[str, Any]) -> Mapping[str, Any]:
    retry = envelope.get("retry")
    return retry if isinstance(retry, Mapping) else {}


def check_envelope(step: StepFacts) -> list[Violation]:
    """The envelope the model sees agrees with the step's state and commit_state."""
    ref, state, envelope = step.operation_ref, step.state, step.envelope
    if state in NO_OUTCOME_YET:
        return []
    if envelope is None:
        return [Violation(ref, "envelope_missing", f"{state} without an envelope")]
    ok, code, commit = envelope.get("ok"), envelope.get("code"), envelope.get("commit_state")
    shown = f"ok={ok} code={code} commit_state={commit}"
    found: list[Violation] = []
    if state is S.SUCCEEDED and (ok is not True or commit != "committed"):
        found.append(Violation(ref, "success_envelope_wrong", shown))
    if state is not S.SUCCEEDED and ok is not False:
        found.append(Violation(ref, "error_state_shows_success", f"{state}: {shown}"))
    if state is S.FAILED and (code == codes.OUTCOME_UNKNOWN or commit == "unknown"):
        found.append(Violation(ref, "failed_shows_unknown", shown))
    if state is S.WAITING_RETRY and not _retry(envelope).get("not_before"):
        found.append(Violation(ref, "retry_without_not_before", shown))
    if step.commit_state != "unknown" and (code == codes.OUTCOME_UNKNOWN or commit == "unknown"):
        # E.g. a write found absent by verification, back to waiting_retry: the unknown
        # outcome is settled, and the model must not be told to verify it still.
        found.append(
            Violation(ref, "stale_unknown_envelope", f"commit_state {step.commit_state}: {shown}")
        )
    elif step.commit_state is not None and commit != step.commit_state:
        found.append(
            Violation(ref, "envelope_disagrees", f"commit_state {step.commit_state}: {shown}")
        )
    return found


def check_steps(steps: Sequence[StepFacts]) -> list[Violation]:
    """Every check on every step, in the order of ``steps``."""
    found: list[Violation] = []
    for step in steps:
        found.extend(check_attempts(step))
        found.extend(check_envelope(step))
    return found


def merged(verdict: Verdict, more: Sequence[Violation]) -> Verdict:
    """``verdict`` with ``more`` violations added (counted by rule too)."""
    violations = (*verdict.violations, *more)
    by_rule: dict[str, int] = {}
    for violation in violations:
        by_rule[violation.rule] = by_rule.get(violation.rule, 0) + 1
    return Verdict(violations, dict(sorted(by_rule.items())))
