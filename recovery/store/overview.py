"""The status page's reading of the store, as any backend answers it: which steps
(:class:`StepFilter`), how many a state holds (:class:`Count`), and
:class:`OverviewPort`, counts and keyset pages at a cost that does not grow with the
table (``sql/overview.py`` over the SQL indexes; ``docs/status-page.md``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.states import StepState

__all__ = ["COUNT_CAP", "MAX_PAGE", "SPARSE", "Count", "OverviewPort", "StepFilter"]

COUNT_CAP: Final = 10_000
"""A state's count is exact up to this; beyond it the page says "10,000+"."""
MAX_PAGE: Final = 200
SPARSE: Final = 500
"""A state with at most this many matching steps has them read from its index range
and sorted, rather than looked for in id order (see ``Overview.page``)."""


@dataclass(frozen=True)
class StepFilter:
    """Which steps: a tool (exact), an operation_ref prefix, and a set of states."""

    tool: str | None = None
    prefix: str | None = None
    states: frozenset[StepState] | None = None


@dataclass(frozen=True)
class Count:
    """How many steps a state holds: exact, or at least ``value`` when ``capped``."""

    value: int
    capped: bool

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


class OverviewPort(Protocol):
    """Read-only queries for the status page (one transaction each)."""

    def counts(
        self,
        where: StepFilter,
        cap: int = COUNT_CAP,
        states: Iterable[StepState] = tuple(StepState),
    ) -> dict[StepState, Count]:
        """Each state's count under the filter's tool and prefix, capped at ``cap``."""
        ...

    def page(
        self,
        where: StepFilter,
        *,
        before: int | None = None,
        limit: int = 50,
        sizes: Mapping[StepState, Count] | None = None,
    ) -> tuple[list[StepRecord], int | None]:
        """The newest ``limit`` steps under the filter with an id below ``before``, and
        the cursor of the next page (None on the last)."""
        ...
