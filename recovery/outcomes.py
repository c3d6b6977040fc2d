"""The values that flow through the decision function: what is stored, what happened,
and what must happen next. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from toolsafe.adapters.envelope import AnySuccess, CommitState, ToolError
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.protocol import FieldError, LookupResult
from toolsafe.adapters.results import Redaction
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.states import StepState


@dataclass(frozen=True)
class StepSnapshot:
    """The step as stored: everything ``decide`` may base a decision on."""

    operation_ref: str
    tool: str
    traits: ToolTraits
    state: StepState
    commit_state: CommitState | None
    attempts: int  # executions claimed so far (counted at the claim, R3/R8)
    max_attempts: int  # the effective limit: min(policy, what envelopes allowed)
    verification_attempts: int  # lookups in the current verification round
    lookups_unavailable: int  # consecutive "lookup unavailable" answers
    input_hash: str
    last_sent_at: datetime | None  # when the last execution was claimed
    fingerprint: str | None
    fingerprint_repeats: int
    flagged_fields: tuple[str, ...] = ()  # fields named by the last correct_input
    approval_input_hash: str | None = None  # input hash the approval request binds to
    due_at: datetime | None = None
    envelope: Mapping[str, Any] | None = None  # the envelope the model sees now (wire JSON)


# ----------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Executed:
    """A worker's execution ended with this (already checked) envelope; ``redactions``
    name what was withheld from its result (recorded in the event)."""

    envelope: AnySuccess | ToolError
    redactions: tuple[Redaction, ...] = ()


@dataclass(frozen=True)
class LookedUp:
    """A worker's verification lookup answered."""

    result: LookupResult
    redactions: tuple[Redaction, ...] = ()


@dataclass(frozen=True)
class LeaseExpired:
    """The worker holding the step vanished: it may have written downstream (R4)."""


@dataclass(frozen=True)
class InputCorrected:
    """The agent service sent corrected input for a step in ``needs_input``."""

    new_input_hash: str
    changed_fields: frozenset[str]
    field_errors: tuple[FieldError, ...] = ()


@dataclass(frozen=True)
class Approved:
    approver: str
    reason: str
    input_hash: str


@dataclass(frozen=True)
class Rejected:
    approver: str
    reason: str


@dataclass(frozen=True)
class Cancelled:
    by: str
    reason: str


@dataclass(frozen=True)
class Resolved:
    """An operator closes or re-drives an escalated step, with a recorded reason.

    ``evidence`` is the downstream reference the operator checked (required to close as
    succeeded); ``confirm_not_written`` is the operator's statement that a write which may
    have happened did not (required to close such a step as failed)."""

    operator: str
    reason: str
    to: StepState  # pending (re-drive), succeeded or failed
    evidence: str | None = None
    confirm_not_written: bool = False


Outcome = (
    Executed | LookedUp | LeaseExpired | InputCorrected | Approved | Rejected | Cancelled | Resolved
)

# ----------------------------------------------------------------------- decisions

Action = Literal[
    "run",  # execute at due_at
    "verify",  # look the operation up at due_at
    "wait_input",  # the agent must correct `fields`
    "wait_approval",  # a human must approve
    "escalate",  # dead letter, with `reason`
    "succeed",  # terminal, with evidence
    "fail",  # terminal
    "cancel",  # terminal
]


@dataclass(frozen=True)
class Decision:
    """The next state and what must happen; the store writes these values as they are."""

    state: StepState
    action: Action
    label: str  # the lifecycle edge, recorded with the event
    commit_state: CommitState | None
    due_at: datetime | None = None
    reason: str | None = None  # stable code for escalations and failures
    fields: tuple[str, ...] = ()
    evidence_ref: str | None = None
    max_attempts: int | None = None  # new effective limit, None = unchanged
    verification_attempts: int | None = None  # None = unchanged
    lookups_unavailable: int | None = None
    fingerprint: str | None = None
    fingerprint_repeats: int | None = None
    input_hash: str | None = None  # corrected input accepted
    approval_input_hash: str | None = None
    extra: dict[str, str | bool] = field(default_factory=dict)
    # What the model sees in the new state (``toolsafe.recovery.envelopes``): None while
    # there is no outcome yet (pending); the adapter's own envelope stays in the event.
    envelope: AnySuccess | ToolError | None = None


class TransitionRefused(ToolsafeError):
    """An agent or operator action the runtime does not allow, with a clear reason.

    ``code`` is stable (e.g. ``IDENTICAL_INPUT``); the message names what is wrong.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
