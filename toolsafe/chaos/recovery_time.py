"""How long steps took to recover, read from their events: each SIGKILL's step from the
kill (its fault marker's time) to the first moment it is settled again — final, or
waiting on the agent or a person (``NEEDS_AGENT``) — and each scenario's recovery wait.
Pure: no I/O."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from toolsafe.recovery.counts import WaitTimes, compute_counts
from toolsafe.recovery.records import CountSources, EventRecord, EventSummary, StepSummary
from toolsafe.recovery.states import NEEDS_AGENT


def recovered_after(killed_at: datetime, events: Iterable[EventRecord]) -> float | None:
    """Seconds from ``killed_at`` until the step was settled (0 when it already was at
    the kill: a kill after the outcome was recorded leaves nothing to recover); None
    when no event settles it afterwards."""
    settled = False
    for event in events:
        if event.at < killed_at:
            if event.to_state is not None:
                settled = event.to_state in NEEDS_AGENT
            continue
        if settled:
            return 0.0
        if event.to_state in NEEDS_AGENT:
            return (event.at - killed_at).total_seconds()
    return 0.0 if settled else None


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in (0, 1]) of non-empty ``values``."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))  # ceil, at least the first
    return ordered[int(rank) - 1]


def summary(seconds: Sequence[float]) -> dict[str, float]:
    """count, p50, p95 and max of ``seconds`` (empty: count 0 only)."""
    if not seconds:
        return {"count": 0}
    return {
        "count": len(seconds),
        "p50": percentile(seconds, 0.50),
        "p95": percentile(seconds, 0.95),
        "max": max(seconds),
    }


def waits_by_scenario(sources: CountSources, scenario: Mapping[str, str]) -> dict[str, WaitTimes]:
    """The recovery wait (first failure → terminal, docs/counts.md) of each scenario's
    steps (``scenario``: operation_ref → name; "?" for a ref it does not name): where a
    long tail comes from."""
    steps: dict[str, list[StepSummary]] = defaultdict(list)
    events: dict[str, list[EventSummary]] = defaultdict(list)
    for step in sources.steps:
        steps[scenario.get(step.operation_ref, "?")].append(step)
    for event in sources.events:
        events[scenario.get(event.operation_ref, "?")].append(event)
    return {name: compute_counts(steps[name], events[name]).recovery_wait for name in sorted(steps)}
