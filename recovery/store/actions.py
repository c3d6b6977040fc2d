"""The agent's and operators' actions on a step, one definition for both stores: each is
an outcome for ``decide`` and the event it writes; the store decides and writes it in
one guarded transaction (``_decided``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from toolsafe.recovery.outcomes import Approved, Cancelled, Outcome, Rejected, Resolved
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import Recorded
from toolsafe.recovery.states import StepState

CANCEL_REQUESTED: Final = "cancel_requested"
"""The event kind of :meth:`StepActions.request_cancel`."""


class StepActions(ABC):
    """approve, reject, cancel and resolve, over a store's ``_decided``."""

    @abstractmethod
    def _decided(
        self,
        operation_ref: str,
        outcome: Outcome,
        *,
        kind: str,
        detail: Mapping[str, Any],
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """Decide on ``outcome`` for the step and write it with a ``kind`` event; raises
        ``TransitionRefused`` (writing nothing) when the lifecycle does not allow it."""

    @abstractmethod
    def _note(
        self, operation_ref: str, *, kind: str, label: str, detail: Mapping[str, Any], now: datetime
    ) -> StepState:
        """Append a ``kind`` event about the step without changing it (the step's state
        as both ends); returns that state, or raises ``StepNotFound``."""

    def request_cancel(
        self, operation_ref: str, *, by: str, reason: str, now: datetime
    ) -> StepState:
        """Record a cancellation asked for while the step cannot be cancelled (running,
        or its outcome unknown): a ``cancel_requested`` event, no change of state. The
        worker honours it when the step next waits with nothing written
        (``toolsafe.tasks.pipeline``); a write verification finds stays a success."""
        return self._note(
            operation_ref,
            kind=CANCEL_REQUESTED,
            label="cancel requested",
            detail={"by": by, "reason": reason},
            now=now,
        )

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
        """awaiting_approval → pending, bound to the input hash the request was for."""
        return self._decided(
            operation_ref,
            Approved(approver, reason, input_hash),
            kind="approved",
            detail={"approver": approver, "reason": reason, "input_hash": input_hash},
            traits=traits,
            policy=policy,
            now=now,
        )

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
        """awaiting_approval → failed."""
        return self._decided(
            operation_ref,
            Rejected(approver, reason),
            kind="rejected",
            detail={"approver": approver, "reason": reason},
            traits=traits,
            policy=policy,
            now=now,
        )

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
        """Any waiting state → cancelled."""
        return self._decided(
            operation_ref,
            Cancelled(by, reason),
            kind="cancelled",
            detail={"by": by, "reason": reason},
            traits=traits,
            policy=policy,
            now=now,
        )

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
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> Recorded:
        """Operator resolution of an escalated step: pending (re-drive; verifying first
        when the outcome is unknown), succeeded (with ``evidence``, a downstream
        reference), failed (with ``confirm_not_written`` when the write may have
        happened). What the operator gave is recorded in the ``resolved`` event."""
        target = StepState(to)
        detail: dict[str, Any] = {"operator": operator, "reason": reason, "to": target.value}
        if evidence is not None and evidence.strip():
            detail["evidence"] = evidence.strip()
        if confirm_not_written:
            detail["confirm_not_written"] = True
        return self._decided(
            operation_ref,
            Resolved(operator, reason, target, evidence, confirm_not_written),
            kind="resolved",
            detail=detail,
            traits=traits,
            policy=policy,
            now=now,
        )
