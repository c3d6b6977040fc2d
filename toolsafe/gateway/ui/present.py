"""What the status page shows of a step, in the article's words: its group, when it will
be retried, and what its success rests on (evidence from the downstream, or an
operator's word, never "no exception")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from toolsafe.recovery.states import DUE_LATER, TERMINAL, StepState, ui_group
from toolsafe.recovery.store import EventRecord, StepRecord
from toolsafe.tasks.views import RESOLVED_BY_OPERATOR, resolved_by_operator, safe_envelope

S = StepState


@dataclass(frozen=True)
class Group:
    """One section of the overview: its key in URLs, its title and its states."""

    key: str
    title: str
    states: tuple[StepState, ...]
    hint: str


GROUPS: Final = (
    Group("input", ui_group(S.NEEDS_INPUT), (S.NEEDS_INPUT,),
          "the agent must send corrected input (same operation_ref)"),
    Group("retry", ui_group(S.WAITING_RETRY), (S.WAITING_RETRY,),
          "nothing was written; the scheduler retries at not_before"),
    Group("verifying", ui_group(S.VERIFYING), (S.VERIFYING,),
          "the write's outcome is unknown; the downstream is asked before anything else"),
    Group("approval", ui_group(S.AWAITING_APPROVAL), (S.AWAITING_APPROVAL,),
          "an operator approves or rejects"),
    Group("queued", ui_group(S.PENDING), (S.PENDING,), "due now; a worker will claim it"),
    Group("running", ui_group(S.IN_FLIGHT), (S.IN_FLIGHT,), "a worker holds it under a lease"),
    Group("terminal", ui_group(S.SUCCEEDED), tuple(s for s in StepState if s in TERMINAL),
          "succeeded with evidence, failed, escalated (an operator resolves), cancelled"),
)  # fmt: skip
"""The article's groups first, then work in progress, then the terminal states."""

BY_KEY: Final = {group.key: group for group in GROUPS}
SHOWS_NOT_BEFORE: Final = DUE_LATER
"""States whose row and page show ``not_before`` with a countdown."""
TERMINAL_TITLES: Final = {
    S.SUCCEEDED: "succeeded with evidence",
    S.FAILED: "failed",
    S.ESCALATED: "escalated",
    S.CANCELLED: "cancelled",
}
FILTERS: Final = {
    **{group.key: group.states for group in GROUPS},
    **{state.value: (state,) for state in TERMINAL_TITLES},
}
"""What the ``group`` filter takes: a group's key, or one terminal state."""
FILTER_TITLES: Final = {
    **{group.key: group.title for group in GROUPS},
    **{state.value: f"terminal: {title}" for state, title in TERMINAL_TITLES.items()},
}


def group_of(state: StepState) -> Group:
    return next(group for group in GROUPS if state in group.states)


def group_title(step: StepRecord) -> str:
    """The step's group as its view names it: a step an operator closed is "resolved by
    an operator", never among the results toolsafe confirmed."""
    if resolved_by_operator(step):
        return f"terminal: {RESOLVED_BY_OPERATOR}"
    group = group_of(step.state)
    return f"terminal: {TERMINAL_TITLES[step.state]}" if group.key == "terminal" else group.title


@dataclass(frozen=True)
class Evidence:
    """What a succeeded step's success rests on, or how an operator closed a step."""

    by_operator: bool
    evidence_ref: str | None
    checked_at: str | None
    operator: str | None
    reason: str | None
    confirm_not_written: bool = False

    @property
    def verified(self) -> bool:
        """Confirmed by the downstream: an adapter's or a lookup's evidence."""
        return not self.by_operator and self.checked_at is not None


def evidence_of(step: StepRecord) -> Evidence | None:
    """A succeeded step's evidence, or an operator's closing of a failed one; None for
    any other step."""
    by_operator = resolved_by_operator(step)
    if step.state is not S.SUCCEEDED and not by_operator:
        return None
    envelope = safe_envelope(step.last_envelope) or {}
    verification = envelope.get("verification")
    verification = verification if isinstance(verification, Mapping) else {}
    # A success carries the operator's words in its result, a failure in safe_details.
    said = envelope.get("result") if step.state is S.SUCCEEDED else envelope.get("safe_details")
    said = said if isinstance(said, Mapping) else {}
    evidence = said.get("evidence") if by_operator else verification.get("evidence_ref")
    return Evidence(
        by_operator=by_operator,
        evidence_ref=_text(evidence),
        checked_at=_text(verification.get("checked_at")),
        operator=_text(said.get("operator")) if by_operator else None,
        reason=_text(said.get("reason")) if by_operator else None,
        confirm_not_written=by_operator and said.get("confirm_not_written") is True,
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def lookups(step: StepRecord) -> str:
    """The lookups of a step being verified: those answered and those that failed."""
    failed = step.lookups_unavailable
    text = f"{step.verification_attempts} lookups"
    return text + (f", {failed} with the lookup unavailable" if failed else "") + " so far"


def lookup_result(detail: dict[str, Any]) -> str:
    """What one ``looked_up`` event found: found, not found, or the lookup's code."""
    summary = detail.get("lookup")
    if not isinstance(summary, dict):
        return ""
    if summary.get("unavailable"):
        return f"lookup unavailable: {summary.get('code') or 'no code'}"
    if summary.get("found"):
        ref = summary.get("evidence_ref")
        return f"found{f' ({ref})' if ref else ''}"
    return "not found" if summary.get("found") is False else ""


def status_line(step: StepRecord) -> str:
    """One line on what the step is doing, as the overview shows it."""
    envelope = safe_envelope(step.last_envelope) or {}
    code = envelope.get("code")
    evidence = evidence_of(step)
    if evidence is not None and evidence.by_operator:
        proof = f", evidence {evidence.evidence_ref}" if evidence.evidence_ref else ""
        return f"resolved by an operator ({evidence.operator or 'unnamed'}{proof}), not verified"
    if step.state is S.SUCCEEDED:
        assert evidence is not None
        if evidence.verified:
            return f"verified: {evidence.evidence_ref or 'checked at ' + str(evidence.checked_at)}"
        return "no evidence recorded: not shown as a success"
    if step.state is S.NEEDS_INPUT:
        return f"{code or 'input refused'}: correct {', '.join(step.flagged_fields) or 'input'}"
    if step.state is S.WAITING_RETRY:
        return f"{code or 'retry'}: attempt {step.attempts} of {step.max_attempts} done"
    if step.state is S.VERIFYING:
        return f"{code or 'outcome unknown'}: {lookups(step)}"
    if step.state is S.AWAITING_APPROVAL:
        return f"{code or 'approval required'}"
    if step.state in TERMINAL:
        return step.reason or str(code or step.state)
    if step.state is S.IN_FLIGHT:
        return f"attempt {step.attempts} of {step.max_attempts}, lease to {step.lease_owner}"
    return "queued"


@dataclass(frozen=True)
class Stop:
    """One event of the timeline, with the envelope the model saw after it (if the event
    carried one) and who acted."""

    event: EventRecord
    actor: str | None
    reason: str | None
    envelope: dict[str, Any] | None


ACTOR_KEYS: Final = ("actor", "by", "approver", "operator", "owner")


def timeline(events: Sequence[EventRecord]) -> list[Stop]:
    """Every event, oldest first: time, kind, the move, who and why, and the envelope."""
    stops: list[Stop] = []
    for event in events:
        detail = event.detail
        actor = next(
            (str(detail[key]) for key in ACTOR_KEYS if isinstance(detail.get(key), str)), None
        )
        if actor is None and event.kind == "claimed":
            actor = "worker"
        reason = detail.get("reason")
        envelope = detail.get("envelope")
        stops.append(
            Stop(
                event=event,
                actor=actor,
                reason=str(reason) if reason is not None else None,
                envelope=safe_envelope(envelope) if isinstance(envelope, Mapping) else None,
            )
        )
    return stops


def countdown(due_at: datetime | None, now: datetime) -> str:
    """``in 1m 05s`` / ``due now`` for a due time."""
    if due_at is None:
        return ""
    seconds = int((due_at - now).total_seconds())
    if seconds <= 0:
        return "due now"
    minutes, rest = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"in {hours}h {minutes:02d}m"
    return f"in {minutes}m {rest:02d}s" if minutes else f"in {rest}s"
