"""What the metrics exporter reads of the event log, as any backend answers it: the
events after a position (:class:`EventRow`), the history before a moment grouped at
once (:class:`EventGroup`), and :class:`TallyPort` (``sql/tally.py`` over the SQL
event table)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, NamedTuple, Protocol

from toolsafe.recovery.states import StepState

__all__ = ["IDS_PER_QUERY", "EventGroup", "EventRow", "TallyPort"]

IDS_PER_QUERY: Final = 500
"""Awaited ids asked for by name in one query (the rest wait for the next poll)."""


class EventRow(NamedTuple):
    """One event as the exporter folds it (only the fields its metrics read)."""

    id: int
    at: datetime
    kind: str
    from_state: StepState | None
    to_state: StepState | None
    reason: str | None
    claim: str | None
    commit_state: str | None
    tool: str | None  # None for an event about a step that does not exist
    submitted_at: datetime | None
    unknown_since: datetime | None  # set when the event leaves verifying


class EventGroup(NamedTuple):
    """Events alike in every field the exporter reads, with how many there are and, for
    each histogram, the bucket their seconds fall in and the seconds' sum."""

    kind: str
    from_state: StepState | None
    to_state: StepState | None
    reason: str | None
    claim: str | None
    commit_state: str | None
    tool: str | None
    events: int
    took_bucket: int | None  # submission → this event, for a move into a terminal state
    took_sum: float
    waited_bucket: int | None  # unknown_since → this event, for an exit from verifying
    waited_sum: float


class TallyPort(Protocol):
    """The event log as the metrics exporter folds it (no write transaction touched)."""

    def events_after(
        self, after: int, awaited: Sequence[int] = (), limit: int = 10_000
    ) -> list[EventRow]:
        """Committed events with an id above ``after`` or among ``awaited`` (at most
        :data:`IDS_PER_QUERY` of them are asked for), id order, at most ``limit``."""
        ...

    def last_event_id(self) -> int:
        """The highest event id committed (0 for an empty log)."""
        ...

    def history(self, before: datetime, bounds: Sequence[float]) -> tuple[int, list[EventGroup]]:
        """Every event that has settled by ``before``, grouped at once (one pass), and
        the position they reach; ``(0, [])`` when the backend has no such pass (the
        exporter then reads the log event by event)."""
        ...
