"""Fake time for the one clock (``tasks/clock.py``): this process's wall and monotonic
clocks, a sleep that only moves them, and a database whose clock is ahead of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from toolsafe.tasks.clock import Clock

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SKEW = timedelta(seconds=30)


class FakeTime:
    """This process's wall and monotonic clocks, and a database 30 s ahead of it whose
    answer takes ``trip`` seconds there and back."""

    def __init__(self, trip: float = 0.2) -> None:
        self.wall = T0
        self.mono = 100.0
        self.trip = trip
        self.reads = 0
        self.failing = False
        self.ahead = SKEW
        self.setup = 0.0  # the next read's connection set-up, before the database reads
        self.slept: list[float] = []

    def local(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds

    def sleep(self, seconds: float) -> None:
        """A sleep that takes no time: both clocks move on, and it is noted."""
        self.slept.append(seconds)
        self.advance(seconds)

    def database(self) -> datetime:
        self.reads += 1
        if self.failing:
            raise ConnectionError("the database is away")
        self.advance(self.setup + self.trip / 2)
        self.setup = 0.0
        theirs = self.wall + self.ahead
        self.advance(self.trip / 2)
        return theirs

    def clock(self, every: float = 45.0, samples: int = 1) -> Clock:
        return Clock(
            self.database,
            every=every,
            retry_after=5.0,
            samples=samples,
            local=self.local,
            monotonic=self.monotonic,
            sleep=self.sleep,
        )
