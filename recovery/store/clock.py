"""The database's clock, an optional feature of a store (``Backend.clock``).

Leases, due times and every ``now`` handed to the store are judged by the database's
clock, never a process's own (DESIGN §8): a process measures how far its clock is off
the database's and adds that to its own time (``toolsafe.tasks.clock``). A backend whose
database runs on the process's own machine clock (SQLite, the memory store) says so with
``same_host``, and nobody queries it; PostgreSQL answers ``clock_timestamp()``
(``sql/clock.py``). A backend without the feature is taken to share the process's clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

__all__ = ["ClockPort"]


class ClockPort(Protocol):
    """What a backend with the ``clock`` feature tells of its database's time."""

    @property
    def same_host(self) -> bool:
        """True when the database keeps this machine's clock (an embedded file, the
        process's memory): its time need never be measured."""
        ...

    def database_time(self) -> datetime:
        """The database's current time (timezone-aware, UTC), read in one round trip."""
        ...
