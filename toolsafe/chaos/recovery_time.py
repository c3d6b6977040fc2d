"""How long a step took to recover from the SIGKILL that struck it: from the kill (its
fault marker's time) to the first moment the step is settled again — final, or waiting
on the agent or a person (``NEEDS_AGENT``) — read from the step's events. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from toolsafe.recovery.records import EventRecord
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
