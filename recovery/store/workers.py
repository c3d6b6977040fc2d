"""The workers' heartbeats, an optional feature of a store (``Backend.workers``): each
``toolsafe worker`` renews its row every heartbeat interval and removes it at a warm
shutdown; a row not renewed within a lease is a worker that died without saying so. The
gateway reads them to say whether any worker consumes (``no_worker``), the status page
and ``toolsafe workers`` to show them. The SQL backend keeps them in ``workers``
(``sql/workers.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

__all__ = ["WorkerBeat", "WorkersPort"]


@dataclass(frozen=True)
class WorkerBeat:
    """One worker as its last heartbeat left it."""

    name: str
    pid: int
    queues: tuple[str, ...]
    started_at: datetime
    last_seen: datetime

    def alive(self, now: datetime, within: float) -> bool:
        """Renewed within the last ``within`` seconds."""
        return now - self.last_seen <= timedelta(seconds=within)


class WorkersPort(Protocol):
    """What a backend with the ``workers`` feature keeps of the workers' heartbeats."""

    def beat(self, name: str, pid: int, queues: Sequence[str], *, now: datetime) -> None:
        """Renew ``name``'s row, or add it (its start time is the first beat's)."""
        ...

    def forget(self, name: str) -> None:
        """Remove ``name``'s row (a warm shutdown)."""
        ...

    def all(self) -> list[WorkerBeat]:
        """Every row, the most recently seen first (dead ones included)."""
        ...

    def live(self, now: datetime, within: float) -> list[WorkerBeat]:
        """The workers renewed within the last ``within`` seconds."""
        ...
