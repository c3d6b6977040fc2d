"""The order in which ``make test``'s xdist workers take the suite's work units.

A work unit (``xdist_scope`` in ``tests/conftest.py``: a file, or the ``serial`` unit)
runs on one worker from start to end, so the run lasts at least as long as the last unit
to start plus its own length. xdist's default (``--loadscope-reorder``) hands out the
units with the most tests first: the unit-test files, hundreds of fast tests each, and
the process files (a few tests, each a minute of real workers) last, where one of them
alone makes the run's tail. Here the longest units go first (longest processing time
first, the classic rule for balancing jobs over machines), each unit's length read from
``tests/support/durations.json`` (seconds per unit, measured by ``make
test-durations``) and, for a unit the table does not know yet, the median of its
kind's known units.

The order changes only when a unit starts, never what a test does or which tests run.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol, TypeVar

DURATIONS: Final = Path(__file__).resolve().parent / "durations.json"
# Without any measurement: a process unit runs real workers (tens of seconds), a
# services unit real servers (seconds), a unit file pure logic.
KIND_GUESS: Final = {"processes": 30.0, "services": 3.0, "unit": 1.0}


class HasNodeId(Protocol):
    @property
    def nodeid(self) -> str: ...


Item = TypeVar("Item", bound=HasNodeId)


def kind_of(scope: str) -> str:
    """The folder kind of a unit (``serial`` holds process tests)."""
    if scope == "serial":
        return "processes"
    parts = scope.removeprefix("tests/").split("/")
    return parts[0] if parts[0] in KIND_GUESS else "unit"


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The measured seconds per unit, or nothing when the table is missing or unreadable
    (the order then falls back on the kinds' guesses: slower, never wrong)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def unit_costs(scopes: Sequence[str], measured: Mapping[str, float]) -> dict[str, float]:
    """Each unit's expected seconds: measured, else the median of its kind's measured
    units, else the kind's guess."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    for scope, seconds in measured.items():
        by_kind[kind_of(scope)].append(seconds)
    costs = {}
    for scope in scopes:
        kind = kind_of(scope)
        if scope in measured:
            costs[scope] = measured[scope]
        elif by_kind[kind]:
            costs[scope] = statistics.median(by_kind[kind])
        else:
            costs[scope] = KIND_GUESS[kind]
    return costs


def longest_first(
    items: Sequence[Item], scope_of: Callable[[str], str], measured: Mapping[str, float]
) -> list[Item]:
    """The items with their units in decreasing expected length; a unit's items stay
    together and in their collected order (ties keep the collected order of units)."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(scope_of(item.nodeid), index)
    costs = unit_costs(list(first_seen), measured)
    return sorted(
        items,
        key=lambda item: (
            -costs[scope_of(item.nodeid)],
            first_seen[scope_of(item.nodeid)],
        ),
    )


class Recorder:
    """Adds up the seconds of each unit's reports (setup, call and teardown) on the
    controller, and writes them as the table ``longest_first`` reads."""

    def __init__(self, scope_of: Callable[[str], str]) -> None:
        self.scope_of = scope_of
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, nodeid: str, duration: float) -> None:
        self.seconds[self.scope_of(nodeid)] += duration

    def write(self, path: Path) -> None:
        """The table with this run's units measured again (a partial run keeps the
        other units' figures)."""
        merged = {**read_durations(path), **self.seconds}
        ordered = dict(sorted(merged.items(), key=lambda pair: -pair[1]))
        rounded = {scope: round(seconds, 1) for scope, seconds in ordered.items()}
        path.write_text(json.dumps(rounded, indent=1) + "\n", encoding="utf-8")
