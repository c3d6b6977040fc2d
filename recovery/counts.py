"""The article's counts, computed from the step event log and the steps as stored.

Pure: no I/O, no clock. ``docs/counts.md`` defines every figure; the chaos report,
``toolsafe stats`` and the Prometheus metrics all print what :func:`compute_counts` returns.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from toolsafe.recovery.reasons import REFUSED_NOOPS, UNSPECIFIED, UNVERIFIABLE_UNKNOWN
from toolsafe.recovery.states import TERMINAL, StepState

# Why a claim for execution was refused (the store's ``noop`` reasons): these are
# executions that would have written again; every other ``noop`` (an execution hint that
# was not due or waits on a human, any verification hint) is a redelivery with nothing to do.
REFUSED_REASONS: Final = REFUSED_NOOPS

QUANTILES: Final = (0.5, 0.95, 0.99)

ATTEMPT_BUCKETS: Final = (0, 1, 2, 3, 5, 10)
"""Upper bounds of the attempts-per-step histogram as exported to Prometheus."""


class EventLike(Protocol):
    """What the counts read of an event (``toolsafe.recovery.store.EventRecord`` fits)."""

    @property
    def id(self) -> int: ...
    @property
    def operation_ref(self) -> str: ...
    @property
    def at(self) -> datetime: ...
    @property
    def kind(self) -> str: ...
    @property
    def from_state(self) -> StepState | None: ...
    @property
    def to_state(self) -> StepState | None: ...
    @property
    def detail(self) -> Mapping[str, Any]: ...


class StepLike(Protocol):
    """What the counts read of a step (``toolsafe.recovery.store.StepRecord`` fits)."""

    @property
    def operation_ref(self) -> str: ...
    @property
    def state(self) -> StepState: ...
    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True)
class Verification:
    """Unknown outcomes (entries into ``verifying``, and unknown writes escalated at
    once because the tool has no lookup) and how each was resolved."""

    committed: int = 0  # lookup found the write: the step succeeded without a second write
    absent: int = 0  # lookup proved nothing was written: a retry with the same operation_ref
    escalated: int = 0  # handed to a human: lookup down too long, or no lookup at all
    cancelled: int = 0  # cancelled while verifying
    open: int = 0  # still verifying when the counts were taken

    @property
    def unknown_outcomes(self) -> int:
        return self.committed + self.absent + self.escalated + self.cancelled + self.open

    @property
    def resolved(self) -> int:
        return self.committed + self.absent + self.escalated


@dataclass(frozen=True)
class Prevented:
    """Writes a blind executor would have sent again, and toolsafe did not."""

    refused: Mapping[str, int] = field(default_factory=dict)  # noop reason in REFUSED_REASONS
    idle_redeliveries: Mapping[str, int] = field(default_factory=dict)  # other noop reasons
    found_committed: int = 0  # verification found the write a blind retry would repeat

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def idle_total(self) -> int:
        return sum(self.idle_redeliveries.values())

    @property
    def total(self) -> int:
        return self.refused_total + self.idle_total + self.found_committed


@dataclass(frozen=True)
class WaitTimes:
    """Seconds from a step's first failure to its first terminal state."""

    count: int = 0
    total: float = 0.0
    quantiles: Mapping[float, float] = field(default_factory=dict)  # empty when count == 0
    max: float | None = None


@dataclass(frozen=True)
class Counts:
    steps: int
    by_state: Mapping[str, int]
    verification: Verification
    prevented: Prevented
    recovery_wait: WaitTimes
    escalations_by_reason: Mapping[str, int]  # steps whose final state is escalated
    attempts: Mapping[int, int]  # executions claimed → number of steps

    @property
    def attempts_total(self) -> int:
        return sum(attempts * steps for attempts, steps in self.attempts.items())


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 < q <= 1.0:
        raise ValueError("q must be in (0, 1]")
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _commit_state(detail: Mapping[str, Any]) -> str | None:
    """The commit_state an ``executed`` event recorded (the envelope, or a flat field)."""
    envelope = detail.get("envelope")
    if isinstance(envelope, Mapping) and isinstance(envelope.get("commit_state"), str):
        return str(envelope["commit_state"])
    value = detail.get("commit_state")
    return value if isinstance(value, str) else None


_RESOLUTIONS: Final = {
    StepState.SUCCEEDED: "committed",
    StepState.WAITING_RETRY: "absent",
    StepState.ESCALATED: "escalated",
    StepState.CANCELLED: "cancelled",
}
"""How a verification round ends, by the state the step leaves ``verifying`` for."""


def _unknown_write(event: EventLike) -> bool:
    """An in_flight → escalated event that gave up on an unknown outcome (no lookup)."""
    return (
        event.kind == "lease_expired"
        or _commit_state(event.detail) == "unknown"
        or event.detail.get("reason") == UNVERIFIABLE_UNKNOWN
    )


def _state(value: object) -> StepState | None:
    return None if value is None else StepState(str(value))


def _ordered(events: Iterable[EventLike]) -> dict[str, list[EventLike]]:
    per_step: dict[str, list[EventLike]] = defaultdict(list)
    for event in events:
        per_step[event.operation_ref].append(event)
    for history in per_step.values():
        history.sort(key=lambda event: (event.at, event.id))
    return per_step


@dataclass
class _Tally:
    verification: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    idle: Counter[str] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)


def _walk(history: Sequence[EventLike], tally: _Tally) -> int:
    """Fold one step's history into ``tally``; returns the executions claimed."""
    claims = 0
    verifying = False
    first_failure: datetime | None = None
    failure_was_final = False
    terminal_at: datetime | None = None
    for event in history:
        src, dst = _state(event.from_state), _state(event.to_state)
        if event.kind == "noop":
            reason = str(event.detail.get("reason", "unspecified"))
            claim = str(event.detail.get("claim", "execute"))
            if claim == "execute" and reason in REFUSED_REASONS:
                tally.refused[reason] += 1
            else:
                tally.idle[f"{claim}:{reason}"] += 1
            continue
        if dst is StepState.IN_FLIGHT and src is not StepState.IN_FLIGHT:
            claims += 1
        if src is StepState.IN_FLIGHT and dst not in (None, StepState.IN_FLIGHT):
            if dst is not StepState.SUCCEEDED and first_failure is None:
                first_failure = event.at
                failure_was_final = dst in TERMINAL
            if dst is StepState.ESCALATED and _unknown_write(event):
                # An unknown write the runtime could not verify: escalated, never retried.
                tally.verification["escalated"] += 1
        if dst is StepState.VERIFYING and src is not StepState.VERIFYING:
            verifying = True
        elif verifying and src is StepState.VERIFYING and dst not in (None, src):
            verifying = False
            resolution = _RESOLUTIONS.get(dst) if dst is not None else None
            if resolution is None:
                raise ValueError(
                    f"{event.operation_ref}: verifying → {dst} is not a lifecycle edge"
                )
            tally.verification[resolution] += 1
        if dst in TERMINAL and terminal_at is None:
            terminal_at = event.at
    if verifying:
        tally.verification["open"] += 1
    if first_failure is not None and terminal_at is not None and not failure_was_final:
        tally.waits.append((terminal_at - first_failure).total_seconds())
    return claims


def compute_counts(steps: Iterable[StepLike], events: Iterable[EventLike]) -> Counts:
    """Every count of ``docs/counts.md`` over these steps and their events.

    ``events`` may arrive in any order; a step's events are replayed by (at, id).
    Events of operation_refs with no step (a message for a step that does not exist)
    count as redeliveries and nothing else.
    """
    step_list = list(steps)
    per_step = _ordered(events)
    tally = _Tally()
    attempts: Counter[int] = Counter()
    for step in step_list:
        attempts[_walk(per_step.pop(step.operation_ref, []), tally)] += 1
    for history in per_step.values():
        _walk(history, tally)
    waits = sorted(tally.waits)
    wait_times = WaitTimes(
        count=len(waits),
        total=sum(waits),
        quantiles={q: percentile(waits, q) for q in QUANTILES} if waits else {},
        max=waits[-1] if waits else None,
    )
    verification = Verification(
        committed=tally.verification["committed"],
        absent=tally.verification["absent"],
        escalated=tally.verification["escalated"],
        cancelled=tally.verification["cancelled"],
        open=tally.verification["open"],
    )
    return Counts(
        steps=len(step_list),
        by_state=dict(sorted(Counter(str(step.state) for step in step_list).items())),
        verification=verification,
        prevented=Prevented(
            refused=dict(sorted(tally.refused.items())),
            idle_redeliveries=dict(sorted(tally.idle.items())),
            found_committed=verification.committed,
        ),
        recovery_wait=wait_times,
        escalations_by_reason=dict(
            sorted(
                Counter(
                    step.reason or UNSPECIFIED
                    for step in step_list
                    if step.state is StepState.ESCALATED
                ).items()
            )
        ),
        attempts=dict(sorted(attempts.items())),
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def render(counts: Counts) -> str:
    """The counts as the text block that ``toolsafe stats`` and the chaos report print."""
    v, p, w = counts.verification, counts.prevented, counts.recovery_wait
    states = ", ".join(f"{state} {n}" for state, n in counts.by_state.items()) or "none"
    lines = [
        f"steps: {counts.steps} ({states})",
        f"unknown outcomes: {v.unknown_outcomes} — resolved by verification: {v.resolved} "
        f"(found committed {v.committed}, found absent {v.absent}, escalated {v.escalated})"
        f", cancelled {v.cancelled}, still verifying {v.open}",
        f"duplicate writes prevented: {p.total}",
        "  executions refused: "
        + (", ".join(f"{r} {n}" for r, n in p.refused.items()) or "none")
        + f" (total {p.refused_total})",
        "  redeliveries with nothing to do: "
        + (", ".join(f"{r} {n}" for r, n in p.idle_redeliveries.items()) or "none")
        + f" (total {p.idle_total})",
        f"  verifications that found the write committed: {p.found_committed}",
        f"recovery wait (first failure → terminal, {w.count} steps): "
        + ", ".join(f"p{round(q * 100)} {_seconds(w.quantiles.get(q))}" for q in QUANTILES)
        + f", max {_seconds(w.max)}",
        "final escalations by reason: "
        + (", ".join(f"{r} {n}" for r, n in counts.escalations_by_reason.items()) or "none"),
        "attempts per step: "
        + (", ".join(f"{a}×{n}" for a, n in counts.attempts.items()) or "none")
        + f" (total {counts.attempts_total})",
    ]
    return "\n".join(lines)


def as_json(counts: Counts) -> dict[str, Any]:
    """The counts as plain JSON (``toolsafe stats --json``, the chaos report file)."""
    v, p, w = counts.verification, counts.prevented, counts.recovery_wait
    return {
        "steps": counts.steps,
        "by_state": dict(counts.by_state),
        "unknown_outcomes": {
            "total": v.unknown_outcomes,
            "found_committed": v.committed,
            "found_absent": v.absent,
            "escalated": v.escalated,
            "cancelled": v.cancelled,
            "open": v.open,
        },
        "duplicate_writes_prevented": {
            "total": p.total,
            "executions_refused": dict(p.refused),
            "idle_redeliveries": dict(p.idle_redeliveries),
            "verifications_found_committed": p.found_committed,
        },
        "recovery_wait_seconds": {
            "count": w.count,
            "sum": w.total,
            **{f"p{round(q * 100)}": w.quantiles.get(q) for q in QUANTILES},
            "max": w.max,
        },
        "final_escalations_by_reason": dict(counts.escalations_by_reason),
        "attempts_per_step": {str(a): n for a, n in counts.attempts.items()},
    }
