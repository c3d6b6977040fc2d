"""The agent's and operators' actions on a step, one definition for every backend: each
is an outcome for ``decide`` and the event it writes, planned by ``plan.acted``; the
backend only reads the step and writes the plan in one guarded transaction (``_act``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from toolsafe.recovery.canonical import changed_fields, input_hash
from toolsafe.recovery.outcomes import (
    Approved,
    Cancelled,
    InputCorrected,
    Outcome,
    Rejected,
    Resolved,
)
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import Recorded
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import Validator

if TYPE_CHECKING:
    from toolsafe.recovery.store.plan import Step

CANCEL_REQUESTED: Final = "cancel_requested"
"""The event kind of :meth:`StepActions.request_cancel`."""


class StepActions(ABC):
    """provide_input, approve, reject, cancel and resolve, over a backend's ``_act``."""

    @abstractmethod
    def _act(
        self,
        operation_ref: str,
        outcome_for: Callable[[Step], Outcome],
        *,
        kind: str,
        detail: Mapping[str, Any],
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> Recorded:
        """In one transaction: read the step (``StepNotFound``), plan the action on it
        (``plan.acted`` with ``outcome_for(step)`` and the ``extra`` columns; its
        ``TransitionRefused`` writes nothing) and write the plan with the compare-and-set
        (``plan.changed_meanwhile`` when it lost)."""

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
        return self._act(
            operation_ref,
            lambda _step: outcome,
            kind=kind,
            detail=detail,
            traits=traits,
            policy=policy,
            now=now,
        )

    def provide_input(
        self,
        operation_ref: str,
        new_input: Mapping[str, Any],
        *,
        validate: Validator,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        stored: Mapping[str, Any] | None = None,
        digest: str | None = None,
        open_stored: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        actor: str | None = None,
    ) -> Recorded:
        """needs_input → pending with the new input, same operation_ref; raises
        ``TransitionRefused`` (identical input, flagged field unchanged, invalid).

        With secret fields the caller passes the plain ``new_input`` (validated and
        compared), what to ``stored`` (sealed), its ``digest``, and ``open_stored`` to
        read the step's sealed input for the comparison."""
        new_input = dict(new_input)
        to_store = dict(stored) if stored is not None else new_input
        new_hash = digest or input_hash(new_input)
        field_errors = tuple(validate(new_input))
        detail: dict[str, Any] = {"input_hash": new_hash}
        if actor is not None:
            detail["actor"] = actor

        def outcome_for(step: Step) -> Outcome:
            before = open_stored(dict(step.input)) if open_stored is not None else step.input
            changed = changed_fields(before, new_input)
            detail["changed_fields"] = sorted(changed)  # names only, never the values
            return InputCorrected(new_hash, changed, field_errors)

        return self._act(
            operation_ref,
            outcome_for,
            kind="input_provided",
            detail=detail,
            traits=traits,
            policy=policy,
            now=now,
            extra={"input": to_store},
        )

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
