"""Transitions planned once, for every backend: ``decide`` on the step as it stands, the
columns the Decision sets and the event the change appends. A backend only does the
compare-and-set that writes the plan (and answers None or a refusal when it lost).

Three kinds of change go through ``decide``: a worker's recorded outcome
(:func:`recorded`), an expired lease (:func:`lease_expired`) and an agent's or an
operator's action (:func:`acted`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import (
    Decision,
    Executed,
    LeaseExpired,
    LookedUp,
    Outcome,
    TransitionRefused,
)
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.reasons import CONCURRENT_CHANGE
from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.rows import decision_detail, decision_values, iso, outcome_detail, snapshot
from toolsafe.recovery.store.shared import (
    REPLACED_ENVELOPE,
    Change,
    Jitter,
    envelope_in_step,
)

if TYPE_CHECKING:
    from sqlalchemy import Row

    Step = Row[Any] | StepRecord

__all__ = ["Plan", "acted", "changed_meanwhile", "lease_expired", "recorded"]


class Plan(NamedTuple):
    """A planned transition: the Decision, the columns it sets, the event it appends."""

    decision: Decision
    values: dict[str, Any]
    change: Change


def recorded(
    step: Step,
    outcome: Executed | LookedUp,
    *,
    traits: ToolTraits,
    policy: Policy,
    now: datetime,
    rng: Jitter,
) -> Plan:
    """A worker's outcome for the step it claimed (an ``executed`` or ``looked_up``
    event, with the adapter's redacted envelope or the lookup's summary).

    When the step goes on to hold the adapter's envelope (the Decision passes it on),
    the event names it there instead of copying it (``envelope_in_step``)."""
    decision = decide(snapshot(step, traits), outcome, now, policy, rng)
    observed = outcome_detail(outcome)  # the adapter's envelope, kept in the event
    shown = None
    if isinstance(outcome, Executed) and decision.envelope is outcome.envelope:
        shown = observed["envelope"]  # serialised once, for both uses
        observed = {**observed, "envelope": envelope_in_step(shown)}
    # The envelope the model sees is the Decision's, in the new state.
    values = decision_values(decision, shown)
    kind = "executed" if isinstance(outcome, Executed) else "looked_up"
    detail = {**observed, **decision_detail(decision)}
    return Plan(decision, values, Change(kind, decision.label, _keeping(step, values, detail)))


def _keeping(step: Step, values: Mapping[str, Any], detail: dict[str, Any]) -> dict[str, Any]:
    """``detail`` with the envelope the change replaces in the step, when it replaces
    one: an earlier event may name it, and from now on only this event holds it
    (``shared.with_envelopes`` reads it back)."""
    before = step.last_envelope
    if before is not None and "last_envelope" in values and values["last_envelope"] != before:
        detail[REPLACED_ENVELOPE] = before
    return detail


def lease_expired(
    step: Step,
    *,
    traits: ToolTraits,
    policy: Policy,
    now: datetime,
    rng: Jitter,
    owner_gone: bool = False,
) -> Plan:
    """The transition of a lost lease (R4); ``owner_gone`` marks an owner proven dead
    before its lease ran out (the event says so). The backend's compare-and-set guards
    on the lease owner too, so a lease renewed, recorded or taken over is left alone."""
    decision = decide(snapshot(step, traits), LeaseExpired(), now, policy, rng)
    detail: dict[str, Any] = {
        "owner": step.lease_owner,
        "lease_expires_at": iso(step.lease_expires_at),
    }
    if owner_gone:
        detail["owner_gone"] = True
    values = decision_values(decision)
    detail = _keeping(step, values, {**detail, **decision_detail(decision)})
    return Plan(decision, values, Change("lease_expired", decision.label, detail))


def acted(
    step: Step,
    outcome: Outcome,
    *,
    kind: str,
    detail: Mapping[str, Any],
    traits: ToolTraits,
    policy: Policy,
    now: datetime,
    rng: Jitter,
    extra: Mapping[str, Any] | None = None,
) -> Plan:
    """An agent's or operator's action as ``outcome`` (a ``kind`` event with ``detail``);
    ``TransitionRefused`` from ``decide`` when the lifecycle does not allow it.
    ``extra`` adds columns of the action's own (a corrected input)."""
    decision = decide(snapshot(step, traits), outcome, now, policy, rng)
    values = decision_values(decision)
    if extra is not None:
        values.update(extra)
    logged = _keeping(step, values, {**detail, **decision_detail(decision)})
    return Plan(decision, values, Change(kind, decision.label, logged))


def changed_meanwhile(operation_ref: str, kind: str) -> TransitionRefused:
    """What a backend raises when its compare-and-set for an action lost."""
    return TransitionRefused(
        CONCURRENT_CHANGE,
        f"step {operation_ref} changed while the {kind} was applied; read it and retry",
    )
