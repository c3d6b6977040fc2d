"""The durable step store: every operation one transaction, every change a guarded
compare-and-set, every change an event row in the same transaction (R2, R3, R8, R10).

THE API BELOW IS THE SEAM between recovery/ and tasks/ — signatures are agreed;
bodies are being implemented (issue 4).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from adapters.envelope import CommitState
from adapters.errors import ToolsafeError
from adapters.protocol import FieldError
from recovery.outcomes import Decision, Executed, LookedUp
from recovery.policy import Policy, ToolTraits
from recovery.states import StepState


class StepNotFound(ToolsafeError, LookupError):
    def __init__(self, operation_ref: str) -> None:
        super().__init__(operation_ref)
        self.operation_ref = operation_ref

    def __str__(self) -> str:
        return f"no step with operation_ref {self.operation_ref!r}"


class OperationRefConflict(ToolsafeError, ValueError):
    """The operation_ref exists with another tool or another input (R2)."""

    def __init__(self, operation_ref: str, what: str) -> None:
        super().__init__(operation_ref, what)
        self.operation_ref = operation_ref
        self.what = what

    def __str__(self) -> str:
        return (
            f"operation_ref {self.operation_ref!r} already exists with a different {self.what}; "
            "use a new operation_ref for a different call"
        )


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


@dataclass(frozen=True)
class Claim:
    """A step this worker holds under a lease; ``step`` is the row after the claim."""

    kind: Literal["execute", "verify"]
    owner: str
    step: StepRecord


@dataclass(frozen=True)
class Recorded:
    step: StepRecord
    decision: Decision


Jitter = random.Random
Validator = Callable[[Mapping[str, Any]], Sequence[FieldError]]


class StepStore:
    """SQLAlchemy implementation over PostgreSQL or SQLite (see ``recovery.db``)."""

    def create_step(
        self,
        tool: str,
        input: Mapping[str, Any],
        *,
        operation_ref: str | None,
        policy: Policy,
        now: datetime,
    ) -> tuple[StepRecord, bool]:
        """Commit a ``pending`` step due now; returns (step, created). Idempotent by
        operation_ref; a different tool/input raises ``OperationRefConflict``."""
        raise NotImplementedError

    def get(self, operation_ref: str) -> StepRecord:
        raise NotImplementedError

    def events(self, operation_ref: str) -> list[EventRecord]:
        raise NotImplementedError

    def list_steps(
        self, states: Sequence[StepState] | None = None, limit: int = 100
    ) -> list[StepRecord]:
        raise NotImplementedError

    def claim_execution(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """pending / due waiting_retry → in_flight, attempt + 1, lease; None (and a
        ``noop`` event naming why) when not due, claimed, terminal or attempts spent."""
        raise NotImplementedError

    def claim_verification(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """A due ``verifying`` step gets a lease (state stays verifying)."""
        raise NotImplementedError

    def record(
        self,
        claim: Claim,
        outcome: Executed | LookedUp,
        *,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        rng: Jitter,
    ) -> Recorded | None:
        """Decide and write the outcome if the claim still holds (CAS on version)."""
        raise NotImplementedError

    def expire_leases(
        self,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
        limit: int = 100,
    ) -> list[Recorded]:
        """in_flight with an expired lease → verifying (R4); an expired verification
        lease is released so the step is due again."""
        raise NotImplementedError

    def due_work(self, now: datetime, limit: int, republish_after: timedelta) -> list[StepRecord]:
        """Steps in pending / waiting_retry / verifying that are due and not leased and
        whose last publish is older than ``republish_after`` (or never); marks them
        published at ``now``. ``FOR UPDATE SKIP LOCKED`` on PostgreSQL."""
        raise NotImplementedError

    def mark_published(self, operation_ref: str, now: datetime) -> None:
        raise NotImplementedError

    def provide_input(
        self,
        operation_ref: str,
        new_input: Mapping[str, Any],
        *,
        validate: Validator,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """needs_input → pending with the new input, same operation_ref; raises
        ``TransitionRefused`` (identical input, flagged field unchanged, invalid)."""
        raise NotImplementedError

    def approve(
        self,
        operation_ref: str,
        *,
        approver: str,
        reason: str,
        input_hash: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        raise NotImplementedError

    def reject(
        self,
        operation_ref: str,
        *,
        approver: str,
        reason: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        raise NotImplementedError

    def cancel(
        self,
        operation_ref: str,
        *,
        by: str,
        reason: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        raise NotImplementedError

    def resolve(
        self,
        operation_ref: str,
        *,
        operator: str,
        reason: str,
        to: StepState,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """Operator resolution of an escalated step: pending (re-drive), succeeded, failed."""
        raise NotImplementedError
