"""Follows the append-only event log from the last id it folded, so every event is
counted exactly once however the writers' commits interleave.

Event ids come from a sequence, taken when the row is inserted, and become visible when
their transaction commits: on PostgreSQL a later id can commit before an earlier one.
Moving past a missing id would lose that event for good, so every id skipped over is
*awaited*: each poll asks for the awaited ids by name next to the new ones, folds any that
have committed since, and gives one up only after ``gap_timeout`` seconds (a transaction
that rolled back leaves its id unused forever; a worker's transaction lasts milliseconds).
A gap whose next event is itself older than ``gap_timeout`` is not awaited at all (the
history a new follower reads from the start, or ids freed by a purge).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from toolsafe.metrics.tally import Group, Row, Tally

MAX_AWAITED: Final = 100_000
"""Awaited ids kept at most (a rolled-back batch of that many would need more)."""


class EventRow(Row, Protocol):
    @property
    def id(self) -> int: ...


Reader = Callable[[int, Sequence[int], int], Sequence[EventRow]]
"""``read(after, awaited, limit)``: committed events with an id above ``after`` or in
``awaited``, in id order, at most ``limit`` (``TallyPort.events_after``)."""

History = Callable[[float], tuple[int, Sequence[Group]]]
"""``history(before)``: ``(upto, groups)``, every event up to the id ``upto`` (the newest
event written before the time ``before``) grouped alike, for a fast first read."""


class EventFollower:
    """A :class:`Tally` kept up to date by :meth:`poll`; thread-safe to read with ``lock``."""

    def __init__(
        self,
        read: Reader,
        *,
        history: History | None = None,
        gap_timeout: float = 60.0,
        batch: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.read = read
        self.history = history
        self.gap_timeout = gap_timeout
        self.batch = batch
        self.clock = clock
        self.lock = threading.Lock()
        self.tally = Tally()
        self.position = 0  # the highest id folded
        self.awaited: dict[int, float] = {}  # id skipped over → when (clock) it was missed
        self.abandoned = 0  # awaited ids given up after gap_timeout
        self.polls = 0
        self._polling = threading.Lock()  # one poll at a time (a thread and a caller)

    def poll(self) -> int:
        """Fold every event committed since the last poll; returns how many."""
        with self._polling:
            return self._poll()

    def _poll(self) -> int:
        now = self.clock()
        folded = 0
        if self.history is not None and self.polls == 0 and self.position == 0:
            # The history older than gap_timeout has no transaction open below it: read
            # it grouped in the database; the rest, event by event, gaps awaited.
            upto, groups = self.history(now - self.gap_timeout)
            with self.lock:
                for group in groups:
                    self.tally.fold_group(group)
                    folded += group.events
                self.position = max(self.position, upto)
        awaited: Sequence[int] = sorted(self.awaited)
        while True:
            rows = self.read(self.position, awaited, self.batch)
            awaited = ()  # asked for once a poll
            with self.lock:
                for row in rows:
                    if row.id in self.awaited:
                        del self.awaited[row.id]
                    elif row.id > self.position:
                        self._skip_to(row, now)
                    else:
                        continue  # folded already
                    self.tally.fold(row)
                    folded += 1
            if len(rows) < self.batch:
                break
        with self.lock:
            for id_, since in list(self.awaited.items()):
                if now - since > self.gap_timeout:
                    del self.awaited[id_]
                    self.abandoned += 1
            self.polls += 1
        return folded

    def _skip_to(self, row: EventRow, now: float) -> None:
        first = self.position + 1
        if row.id > first and row.at.timestamp() >= now - self.gap_timeout:
            for missing in range(max(first, row.id - MAX_AWAITED), row.id):
                self.awaited[missing] = now
        self.position = row.id
