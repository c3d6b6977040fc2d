"""The store's answers as plain frozen values: a step, an event, a claim, a recorded
outcome (built from database rows; no session or connection attached)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import Row

from toolsafe.adapters.envelope import CommitState
from toolsafe.recovery.outcomes import Decision
from toolsafe.recovery.policy import Policy
from toolsafe.recovery.states import StepState


@dataclass(frozen=True)
class StepRecord:
    id: int
    operation_ref: str
    tool: str
    input: dict[str, Any]
    input_hash: str
    state: StepState
    commit_state: CommitState | None
    attempts: int
    max_attempts: int
    verification_attempts: int
    lookups_unavailable: int
    due_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    last_sent_at: datetime | None
    last_envelope: dict[str, Any] | None  # the redacted envelope JSON, never raw text
    fingerprint: str | None
    fingerprint_repeats: int
    flagged_fields: tuple[str, ...]
    approval_input_hash: str | None
    reason: str | None  # escalation / failure reason code
    published_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class EventRecord:
    id: int
    operation_ref: str
    at: datetime
    kind: str  # submitted, claimed, executed, looked_up, lease_expired, noop, ...
    from_state: StepState | None
    to_state: StepState | None
    label: str
    detail: dict[str, Any]  # redacted: envelope JSON, lookup summary, actor and reason


ClaimKind = Literal["execute", "verify"]


@dataclass(frozen=True)
class Claim:
    """A step this worker holds under a lease; ``step`` is the row after the claim."""

    kind: ClaimKind
    owner: str
    step: StepRecord


@dataclass(frozen=True)
class Refused:
    """Why a claim did nothing (``reasons.NOOP_REASONS``: the ``noop`` event's reason).

    ``due_at`` is set when only time stands in the way: the reason is ``not_due`` and
    the row as the claim found it would pass the same guard at its ``due_at`` (an early
    hint). A claim at that time may still be refused: the step can move meanwhile."""

    reason: str
    due_at: datetime | None = None


@dataclass(frozen=True)
class Recorded:
    step: StepRecord
    decision: Decision


@dataclass(frozen=True)
class Submitted:
    """What ``StepStore.submit`` did: the step, and its ``submitted`` event when new."""

    step: StepRecord
    event: EventRecord | None

    @property
    def created(self) -> bool:
        return self.event is not None


@dataclass(frozen=True)
class NewStep:
    """One call of a batch submission (``submit_many``): what ``submit`` takes for one
    step, with the same meaning (``operation_ref`` None: a new one is made)."""

    tool: str
    input: Mapping[str, Any]
    operation_ref: str | None
    policy: Policy
    digest: str | None = None
    equivalent_hashes: Collection[str] = ()
    same_input: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True)
class StepSummary:
    """What the counts and the chaos run read of a step: no input, no envelope."""

    operation_ref: str
    state: StepState
    commit_state: CommitState | None
    reason: str | None


@dataclass(frozen=True)
class EventSummary:
    """What the counts read of an event; ``detail`` holds only ``reason``, ``claim`` and
    the ``commit_state`` an executed envelope recorded (each only when present)."""

    id: int
    operation_ref: str
    at: datetime
    kind: str
    from_state: StepState | None
    to_state: StepState | None
    detail: dict[str, str]


@dataclass(frozen=True)
class CountSources:
    """The steps and events the article's counts are computed from, read together."""

    steps: list[StepSummary]
    events: list[EventSummary]


def step_record(row: Row[Any]) -> StepRecord:
    return StepRecord(
        id=row.id,
        operation_ref=row.operation_ref,
        tool=row.tool,
        input=dict(row.input),
        input_hash=row.input_hash,
        state=StepState(row.state),
        commit_state=cast(CommitState | None, row.commit_state),
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        verification_attempts=row.verification_attempts,
        lookups_unavailable=row.lookups_unavailable,
        due_at=row.due_at,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        last_sent_at=row.last_sent_at,
        last_envelope=row.last_envelope,
        fingerprint=row.fingerprint,
        fingerprint_repeats=row.fingerprint_repeats,
        flagged_fields=tuple(row.flagged_fields or ()),
        approval_input_hash=row.approval_input_hash,
        reason=row.reason,
        published_at=row.published_at,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def event_record(row: Row[Any]) -> EventRecord:
    return EventRecord(
        id=row.id,
        operation_ref=row.operation_ref,
        at=row.at,
        kind=row.kind,
        from_state=None if row.from_state is None else StepState(row.from_state),
        to_state=None if row.to_state is None else StepState(row.to_state),
        label=row.label,
        detail=dict(row.detail),
    )
