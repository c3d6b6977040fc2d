"""What agents, the model and operators may see of a step: safe fields only, never raw.

The stored envelope is already redacted by the adapter boundary; these views copy
only the fields the contract marks as safe, so a future column cannot leak by accident.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from toolsafe.adapters.envelope import AnySuccess, ToolError, parse_result, to_wire
from toolsafe.adapters.redaction import clean_text, redact
from toolsafe.recovery.reasons import OPERATOR_RESOLVED
from toolsafe.recovery.secrets import is_sealed
from toolsafe.recovery.states import NEEDS_AGENT, NO_OUTCOME_YET, TERMINAL, StepState, ui_group
from toolsafe.recovery.store import EventRecord, StepRecord

log = logging.getLogger("toolsafe.views")

Envelope = AnySuccess | ToolError
"""The envelope a view carries: the contract's own models, parsed once, when the view
is built (``toolsafe.adapters.envelope``)."""

# The envelope fields the model and UIs may see (DESIGN §1); result is the adapter's
# structured answer, built from parsed fields, not upstream text.
SAFE_ENVELOPE_FIELDS: Final = (
    "ok",
    "code",
    "category",
    "commit_state",
    "retry",
    "next_action",
    "operation_ref",
    "safe_details",
    "agent_message",
    "user_message",
    "result",
    "verification",
)
# Event detail keys that carry no upstream text: codes, actors and their reasons.
SAFE_DETAIL_KEYS: Final = (
    "code",
    "next_action",
    "commit_state",
    "reason",
    "actor",
    "by",
    "approver",
    "operator",
    "found",
    "result",
    "evidence_ref",
    "evidence",
    "confirm_not_written",
    "fields",
)
MAX_TEXT: Final = 200
RESOLVED_BY_OPERATOR: Final = "resolved by an operator"
"""The group of a terminal step an operator closed (succeeded or failed): shown apart
from the steps toolsafe verified or failed itself."""


@dataclass(frozen=True)
class HistoryEntry:
    at: datetime
    kind: str
    from_state: str | None
    to_state: str | None
    label: str
    detail: dict[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class StepView:
    """A step as an agent service (and the model) may see it."""

    operation_ref: str
    tool: str
    state: StepState
    ui_group: str
    commit_state: str | None
    attempts: int
    max_attempts: int
    due_at: datetime | None
    reason: str | None
    fields: tuple[str, ...]
    envelope: Envelope | None
    text: str
    history: tuple[HistoryEntry, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def needs_agent(self) -> bool:
        """The agent has to act (input, approval) or the step is over."""
        return self.state in NEEDS_AGENT

    def envelope_json(self) -> dict[str, Any] | None:
        """The envelope as wire JSON (the article's field names), or None."""
        return None if self.envelope is None else to_wire(self.envelope)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["envelope"] = self.envelope_json()
        data["state"] = str(self.state)
        data["due_at"] = self.due_at.isoformat() if self.due_at else None
        data["history"] = [{**asdict(entry), "at": entry.at.isoformat()} for entry in self.history]
        return data


def _scalar(value: object) -> str | int | float | bool | None:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return None


def safe_envelope(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The stored (redacted) envelope, restricted to the contract's safe fields."""
    if not stored:
        return None
    return {key: stored[key] for key in SAFE_ENVELOPE_FIELDS if key in stored}


def safe_detail(detail: Mapping[str, Any]) -> dict[str, str | int | float | bool]:
    """Codes, actors and reasons from an event's detail; nothing free-form from upstream."""
    picked: dict[str, str | int | float | bool] = {}
    sources: list[Mapping[str, Any]] = [detail]
    for nested in ("envelope", "lookup", "decision"):
        inner = detail.get(nested)
        if isinstance(inner, Mapping):
            sources.append(inner)
    redactions = detail.get("redactions")
    if isinstance(redactions, list) and redactions:
        # Where and why a result was cut: paths of the result and kinds, never the text.
        picked["redactions"] = ", ".join(
            f"{item.get('path')}:{item.get('kind')}"
            for item in redactions
            if isinstance(item, Mapping)
        )[:MAX_TEXT]
    for source in sources:
        for key in SAFE_DETAIL_KEYS:
            if key in picked or key not in source:
                continue
            value = source[key]
            if isinstance(value, list | tuple):
                value = ", ".join(str(item) for item in value)
            scalar = _scalar(value)
            if scalar is not None:
                picked[key] = scalar
    return picked


SEALED_SHOWN: Final = "[secret]"
_INPUT_DEPTH: Final = 8
_INPUT_ITEMS: Final = 100


def redacted_input(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A step's stored input as an operator may see it: secret fields (sealed at rest)
    shown as ``[secret]``, strings cleaned, scanned for secrets and capped, nesting and
    lists bounded. Never opens a sealed value."""

    def shown(value: object, depth: int) -> object:
        if is_sealed(value):
            return SEALED_SHOWN
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return redact(clean_text(value))[:MAX_TEXT]
        if depth >= _INPUT_DEPTH:
            return "[nested too deep]"
        if isinstance(value, Mapping):
            items = list(value.items())[:_INPUT_ITEMS]
            return {str(key)[:MAX_TEXT]: shown(item, depth + 1) for key, item in items}
        if isinstance(value, list | tuple):
            return [shown(item, depth + 1) for item in value[:_INPUT_ITEMS]]
        return f"[{type(value).__name__}]"

    return {str(key)[:MAX_TEXT]: shown(value, 1) for key, value in stored.items()}


def history(events: Sequence[EventRecord]) -> tuple[HistoryEntry, ...]:
    return tuple(
        HistoryEntry(
            at=event.at,
            kind=event.kind,
            from_state=str(event.from_state) if event.from_state else None,
            to_state=str(event.to_state) if event.to_state else None,
            label=event.label,
            detail=safe_detail(event.detail),
        )
        for event in events
    )


def resolved_by_operator(step: StepRecord) -> bool:
    """An operator closed the step (succeeded or failed) by hand."""
    return step.state in TERMINAL and step.reason == OPERATOR_RESOLVED


def view_group(step: StepRecord) -> str:
    """The state's group (``ui_group``), or ``RESOLVED_BY_OPERATOR`` for a step an
    operator closed: never shown among the successes toolsafe confirmed."""
    return RESOLVED_BY_OPERATOR if resolved_by_operator(step) else ui_group(step.state)


def _resolution_text(step: StepRecord, envelope: Mapping[str, Any] | None) -> str:
    ref = step.operation_ref
    shown = envelope or {}
    result = shown.get("result")
    details = shown.get("safe_details")
    source = result if isinstance(result, Mapping) else details
    operator = source.get("operator") if isinstance(source, Mapping) else None
    who = f"an operator ({operator})" if isinstance(operator, str) else "an operator"
    if step.state is StepState.SUCCEEDED:
        evidence = result.get("evidence") if isinstance(result, Mapping) else None
        proof = f" with evidence {evidence}" if isinstance(evidence, str) else ""
        return (
            f"{step.tool} was resolved as succeeded by {who}{proof} (operation_ref {ref}); "
            "toolsafe did not verify it itself. Do not call it again."
        )
    return (
        f"{step.tool} was resolved as failed by {who} (operation_ref {ref}); it will not run again."
    )


def _evidence_ref(envelope: Mapping[str, Any] | None) -> str | None:
    verification = envelope.get("verification") if envelope else None
    found = verification.get("evidence_ref") if isinstance(verification, Mapping) else None
    return found if isinstance(found, str) and found else None


def model_text(step: StepRecord, envelope: Mapping[str, Any] | None) -> str:
    """A short, factual text for the model: what happened and what it may do next."""
    ref = step.operation_ref
    agent_message = str(envelope.get("agent_message", "")) if envelope else ""
    state = step.state
    if resolved_by_operator(step):
        return _resolution_text(step, envelope)
    if state is StepState.SUCCEEDED:
        # The evidence id in the text too: a host that forwards only the text content
        # (and drops structured content) still gives the model the downstream's record.
        evidence = _evidence_ref(envelope)
        proof = f", evidence {evidence}" if evidence else ""
        return f"{step.tool} succeeded and was confirmed (operation_ref {ref}{proof})."
    if state is StepState.NEEDS_INPUT:
        fields = ", ".join(step.flagged_fields) or "the flagged fields"
        return (
            f"{agent_message} Correct {fields} and send the corrected input for "
            f"operation_ref {ref}; an identical input is refused."
        ).strip()
    if state is StepState.AWAITING_APPROVAL:
        return f"{step.tool} is waiting for a human approval (operation_ref {ref}); do not retry."
    if state is StepState.WAITING_RETRY:
        when = step.due_at.isoformat() if step.due_at else "soon"
        return (
            f"{step.tool} will be retried automatically, not before {when}; do not call it again."
        )
    if state is StepState.VERIFYING:
        return (
            f"The outcome of {step.tool} is being verified with the downstream "
            f"(operation_ref {ref}); do not call it again."
        )
    if state is StepState.ESCALATED:
        return (
            f"{step.tool} was handed to an operator (reason {step.reason or 'unknown'}); "
            "make a new plan or wait for the operator."
        )
    if state is StepState.FAILED:
        return f"{step.tool} failed (reason {step.reason or 'unknown'}); it will not run again."
    if state is StepState.CANCELLED:
        return f"{step.tool} was cancelled; it will not run."
    if state is StepState.IN_FLIGHT:
        return f"{step.tool} is running (operation_ref {ref})."
    return f"{step.tool} is queued (operation_ref {ref})."


def build_view(step: StepRecord, events: Sequence[EventRecord] = ()) -> StepView:
    # The stored envelope is the runtime's for the state (toolsafe.recovery.envelopes);
    # a claimed step keeps its previous one in the row but has no outcome yet.
    shown = None if step.state in NO_OUTCOME_YET else safe_envelope(step.last_envelope)
    return StepView(
        operation_ref=step.operation_ref,
        tool=step.tool,
        state=step.state,
        ui_group=view_group(step),
        commit_state=step.commit_state,
        attempts=step.attempts,
        max_attempts=step.max_attempts,
        due_at=step.due_at,
        reason=step.reason,
        fields=tuple(step.flagged_fields),
        envelope=_parsed(step.operation_ref, shown),
        text=model_text(step, shown),
        history=history(events),
    )


def _parsed(operation_ref: str, shown: Mapping[str, Any] | None) -> Envelope | None:
    """The stored envelope as the contract's model. The runtime stores only envelopes
    that passed the contract; a row that does not (written by hand, or by a version
    that broke it) is shown without one, and said so in the log."""
    if shown is None:
        return None
    try:
        return parse_result(shown)
    except ValidationError as error:
        log.warning(
            "stored envelope breaks the contract; the view shows none: %s",
            error.errors()[0]["msg"] if error.errors() else "invalid",
            extra={"event": "envelope_unreadable", "operation_ref": operation_ref},
        )
        return None
