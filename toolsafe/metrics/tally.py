"""The store-wide figures, kept by folding events one at a time (pure: no I/O, no clock).

Each event changes a few counters by a constant amount, so the figures after a baseline
plus the events since are the figures over the whole log, and a scrape renders them
without reading the database. docs/operations.md lists every metric.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Final, Protocol

from toolsafe.recovery.reasons import REFUSED_NOOPS, UNSPECIFIED, UNVERIFIABLE_UNKNOWN
from toolsafe.recovery.states import TERMINAL, StepState

DURATION_BUCKETS: Final = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0, 14400.0, 86400.0,
)  # fmt: skip
"""Upper bounds (seconds) of both histograms: from a fast call to a day-long approval."""

UNKNOWN_TOOL: Final = "unknown"
"""The tool label of an event about a step that does not exist (a stray message)."""

RESOLUTIONS: Final = {
    StepState.SUCCEEDED: "committed",
    StepState.WAITING_RETRY: "absent",
    StepState.ESCALATED: "escalated",
    StepState.CANCELLED: "cancelled",
}
"""How an unknown outcome ends, by the state its step leaves ``verifying`` for."""

LOOKUP_RESULTS: Final = {
    StepState.SUCCEEDED: "found",
    StepState.WAITING_RETRY: "absent",
    StepState.VERIFYING: "inconclusive",
    StepState.ESCALATED: "escalated",
}
"""What one lookup (a ``looked_up`` event) found, by the state it left the step in."""


class Fields(Protocol):
    """What an event and a group of alike events have in common."""

    @property
    def kind(self) -> str: ...
    @property
    def from_state(self) -> StepState | None: ...
    @property
    def to_state(self) -> StepState | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def claim(self) -> str | None: ...
    @property
    def commit_state(self) -> str | None: ...
    @property
    def tool(self) -> str | None: ...


class Row(Fields, Protocol):
    """What the tally reads of an event (``toolsafe.recovery.store.tally.EventRow``)."""

    @property
    def at(self) -> datetime: ...
    @property
    def submitted_at(self) -> datetime | None: ...
    @property
    def unknown_since(self) -> datetime | None: ...


class Group(Fields, Protocol):
    """Events alike (``toolsafe.recovery.store.tally.EventGroup``): how many, and for each
    histogram the bucket index their seconds fall in (None: not observed) and the sum."""

    @property
    def events(self) -> int: ...
    @property
    def took_bucket(self) -> int | None: ...
    @property
    def took_sum(self) -> float: ...
    @property
    def waited_bucket(self) -> int | None: ...
    @property
    def waited_sum(self) -> float: ...


@dataclass
class Histogram:
    """A Prometheus histogram: counts per bucket (not cumulative) and the sum."""

    bounds: Sequence[float] = DURATION_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def add(self, index: int, n: int, total: float) -> None:
        """``n`` observations in bucket ``index`` (as ``observe`` would place them)."""
        self.counts[index] += n
        self.total += total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as Prometheus exposes them, ``+Inf`` last."""
        pairs: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            running += n
            pairs.append((bound, running))
        return pairs


def _seconds(end: datetime, start: datetime | None) -> float | None:
    return None if start is None else max(0.0, (end - start).total_seconds())


@dataclass
class Tally:
    """Every store-wide figure, as folded so far."""

    steps: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, state)
    submitted: Counter[str] = field(default_factory=Counter)  # tool
    executions: Counter[str] = field(default_factory=Counter)  # tool: claims to in_flight
    finished: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, state)
    unknown_resolved: Counter[tuple[str, str]] = field(default_factory=Counter)
    lookups: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, result)
    escalations: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, reason)
    prevented: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, reason)
    duration: dict[str, Histogram] = field(default_factory=dict)  # submit → terminal
    recovery_wait: dict[str, Histogram] = field(default_factory=dict)  # unknown → resolved
    events: int = 0

    def fold(self, row: Row) -> None:
        """Count one event (each event exactly once, in any order across steps)."""
        took = _seconds(row.at, row.submitted_at)
        waited = _seconds(row.at, row.unknown_since)
        self._count(
            row,
            1,
            None if took is None else partial(Histogram.observe, value=took),
            None if waited is None else partial(Histogram.observe, value=waited),
        )

    def fold_group(self, group: Group) -> None:
        """Count ``group.events`` events alike (the history, grouped in the database)."""
        n = group.events
        took = waited = None
        if group.took_bucket is not None:
            took = partial(Histogram.add, index=group.took_bucket, n=n, total=group.took_sum)
        if group.waited_bucket is not None:
            waited = partial(Histogram.add, index=group.waited_bucket, n=n, total=group.waited_sum)
        self._count(group, n, took, waited)

    def _count(
        self,
        row: Fields,
        n: int,
        took: Callable[[Histogram], None] | None,
        waited: Callable[[Histogram], None] | None,
    ) -> None:
        self.events += n
        tool = row.tool or UNKNOWN_TOOL
        src, dst = row.from_state, row.to_state
        if row.kind == "noop":
            reason = row.reason or UNSPECIFIED
            claim = row.claim or "execute"
            if claim == "execute" and reason in REFUSED_NOOPS:
                self.prevented["execution_refused", reason] += n
            else:
                self.prevented["idle_redelivery", f"{claim}:{reason}"] += n
            return
        if src is not dst:
            if src is not None:
                self.steps[tool, src.value] -= n
            if dst is not None:
                self.steps[tool, dst.value] += n
        if src is None and dst is StepState.PENDING:
            self.submitted[tool] += n
        if dst is StepState.IN_FLIGHT and src is not StepState.IN_FLIGHT:
            self.executions[tool] += n
        if dst is None or src is dst:
            if row.kind == "looked_up" and dst is StepState.VERIFYING:
                self.lookups[tool, LOOKUP_RESULTS[dst]] += n
            return
        if row.kind == "looked_up":
            self.lookups[tool, LOOKUP_RESULTS.get(dst, dst.value)] += n
        if dst in TERMINAL:
            self.finished[tool, dst.value] += n
            if took is not None:
                took(self.duration.setdefault(tool, Histogram()))
        if dst is StepState.ESCALATED:
            self.escalations[tool, row.reason or UNSPECIFIED] += n
            if src is StepState.IN_FLIGHT and self._unknown_write(row):
                # A write whose outcome is unknown and that no lookup can settle.
                self.unknown_resolved[tool, "escalated"] += n
        if src is StepState.VERIFYING:
            resolution = RESOLUTIONS.get(dst, dst.value)
            self.unknown_resolved[tool, resolution] += n
            if resolution == "committed":
                self.prevented["found_committed", "verification"] += n
            if waited is not None:
                waited(self.recovery_wait.setdefault(tool, Histogram()))

    @staticmethod
    def _unknown_write(row: Fields) -> bool:
        return (
            row.kind == "lease_expired"
            or row.commit_state == "unknown"
            or row.reason == UNVERIFIABLE_UNKNOWN
        )
