"""The one clock: the database's, as this process reads it (DESIGN §8).

Leases, ``not_before`` and every due time live in the database and are compared there
with the ``now`` a process hands to the store; if each process used its own wall clock,
a worker 30 s behind would write leases the sweeper sees as expired at once, and one
30 s ahead would hold them 30 s too long. So every ``now`` the tasks room hands to the
store or to ``decide`` is :meth:`Clock.now`: this process's time plus its measured
offset from the database's.

The offset is measured at the first use and again every :data:`MEASURE_EVERY` seconds
(``SELECT clock_timestamp()`` twice, the shorter round trip's halved), never per step. A failed
measurement keeps the last offset, logs one line and is tried again after
:data:`RETRY_AFTER` seconds. A store whose database keeps this machine's clock (SQLite,
the memory store: ``same_host``) or that has no ``clock`` feature gives offset 0 and is
never queried.

Times an adapter produced on the process's clock (``retry.not_before``,
``verification.checked_at``, a lookup's ``checked_at``) are moved onto the database's by
:func:`on_database_clock`, where the worker hands the outcome to the runtime.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

from toolsafe.adapters.envelope import ToolError
from toolsafe.recovery.outcomes import Executed, LookedUp

log = logging.getLogger("toolsafe.clock")

MEASURE_EVERY: Final = 45.0
"""Seconds between two measurements of the offset (clocks drift slowly; NTP steps)."""
RETRY_AFTER: Final = 5.0
"""Seconds before a failed measurement is tried again."""
SAMPLES: Final = 2
"""Reads per measurement; the shortest round trip's is kept."""
NOTABLE: Final = timedelta(seconds=1)
"""An offset this large (or a change this large) is logged."""


def early_bound(uncertainty: timedelta, allowance: timedelta) -> timedelta:
    """The longest a worker whose clock has ``uncertainty`` waits out an early hint:
    twice that (its own error and the publisher's, measured alike) plus ``allowance``
    (``settings.calls.early_wait``: the clocks' drift between two measurements and the
    consuming worker's timer)."""
    return 2 * max(uncertainty, timedelta(0)) + allowance


def eta_margin(uncertainty: timedelta, allowance: timedelta) -> timedelta:
    """How much later than its best estimate a publisher whose clock has
    ``uncertainty`` sends an ETA: what exceeds half of ``allowance`` (nothing while its
    measurement's round trip is under the allowance: under 5 ms by default). A hint is
    then early by at most half the allowance plus the consumer's own error, inside the
    :func:`early_bound` of any consumer with the same allowance, with room to spare,
    however unlike the two measurements were (a publisher measured on a loaded machine,
    a consumer on a quiet one)."""
    return max(uncertainty - allowance / 2, timedelta(0))


def local_now() -> datetime:
    """This process's own wall clock (UTC)."""
    return datetime.now(UTC)


DatabaseTime = Callable[[], datetime | None]
"""Reads the database's time; None when the database keeps this machine's clock."""


class Clock:
    """The database's time as this process sees it: local time + measured offset.

    ``read`` returns the database's time (or None: same clock, offset 0, never measured
    again); ``local`` and ``monotonic`` are this process's clocks and ``sleep`` waits on
    them (all three injected in tests).
    Thread-safe: one thread measures while the others go on with the last offset.
    """

    def __init__(
        self,
        read: DatabaseTime,
        *,
        every: float = MEASURE_EVERY,
        retry_after: float = RETRY_AFTER,
        samples: int = SAMPLES,
        local: Callable[[], datetime] = local_now,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._read = read
        self.every = every
        self.retry_after = retry_after
        self.samples = max(samples, 1)
        self._local = local
        self._monotonic = monotonic
        self._sleep = sleep
        self._offset = timedelta(0)
        self._uncertainty = timedelta(0)  # half the kept sample's round trip
        self._logged = timedelta(0)
        self._measured = False  # a measurement (or a failed one) happened
        self._next = -math.inf  # monotonic time of the next measurement
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def offset(self) -> timedelta:
        """The database's time minus this process's (0 until measured)."""
        return self._offset

    def now(self) -> datetime:
        """The database's time now (measured again when due: at most one query per
        ``every`` seconds)."""
        if self._monotonic() >= self._next:
            self._measure_when_due()
        return self._local() + self._offset

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this process's clocks."""
        self._sleep(seconds)

    def to_database(self, local: datetime) -> datetime:
        """A time this process's clock produced, on the database's."""
        return local + self._offset

    @property
    def uncertainty(self) -> timedelta:
        """How far the offset may be off: half the measured round trip."""
        return self._uncertainty

    def to_local(self, database: datetime) -> datetime:
        """A database time on this process's clock."""
        return database - self._offset

    def local_eta(self, due: datetime, allowance: timedelta) -> datetime:
        """A Celery ETA for ``due`` (a database time) on this process's clock, which
        the consumer compares with its own: the best estimate, later only by what this
        process's :attr:`uncertainty` exceeds half the early ``allowance``
        (``settings.calls.early_wait``; :func:`eta_margin`: nothing on a quiet machine).
        It may arrive early by up to that half allowance plus the consumer's own error;
        the claim then finds the step due within the consumer's :func:`early_bound` and
        the worker waits out the rest (``tasks/early.py``), so the call never runs early
        (the claim still refuses it, R6) and is not late by a safety margin either. A hint
        early by more (a clock stepped since its last measurement) is refused, and the
        sweeper sends it again."""
        return due - self._offset + eta_margin(self._uncertainty, allowance)

    def measure(self) -> bool:
        """Measure the offset now; False (the last offset kept, one line logged) when
        the database could not be asked.

        ``samples`` reads, the one with the shortest round trip kept (as NTP does): the
        first read of a process also opens its connection, and the database reads its
        clock at the end of that, not halfway through."""
        best: tuple[float, timedelta] | None = None
        for _ in range(self.samples):
            before = self._local()
            started = self._monotonic()
            try:
                theirs = self._read()
            except Exception as error:  # the database is away: keep what we had
                self._next = self._monotonic() + self.retry_after
                self._measured = True
                log.warning(
                    "cannot read the database's clock (%s); this process's clock is still "
                    "taken as %+.3f s off it",
                    type(error).__name__,
                    -self._offset.total_seconds(),
                    extra={"event": "clock_unmeasured"},
                )
                return False
            elapsed = self._monotonic() - started
            if theirs is None:  # the same clock as ours: nothing to measure, ever
                self._measured = True
                self._offset = timedelta(0)
                self._uncertainty = timedelta(0)
                self._next = math.inf
                return True
            # The database read its clock about halfway through the round trip.
            offset = theirs - (before + timedelta(seconds=elapsed / 2))
            if best is None or elapsed < best[0]:
                best = (elapsed, offset)
        assert best is not None
        self._measured = True
        self._offset = best[1]
        self._uncertainty = timedelta(seconds=best[0] / 2)
        self._next = self._monotonic() + self.every
        if abs(self._offset - self._logged) >= NOTABLE:
            self._logged = self._offset
            log.warning(
                "this process's clock is %+.3f s off the database's; the database's rules",
                -self._offset.total_seconds(),
                extra={"event": "clock_offset", "offset": self._offset.total_seconds()},
            )
        return True

    def _measure_when_due(self) -> None:
        if self._pid != os.getpid():  # forked (beat's process too): the lock may be held
            self.after_fork()
        if not self._measured:
            with self._lock:  # the first use waits for the first measurement
                if not self._measured:
                    self.measure()
            return
        if self._lock.acquire(blocking=False):  # others go on with the last offset
            try:
                if self._monotonic() >= self._next:
                    self.measure()
            finally:
                self._lock.release()

    def after_fork(self) -> None:
        """A new process keeps the offset (the same machine clock) and measures again
        at its next due time."""
        self._lock = threading.Lock()
        self._pid = os.getpid()


def on_database_clock(outcome: Executed | LookedUp, offset: timedelta) -> Executed | LookedUp:
    """``outcome`` with the times its adapter stamped on this process's clock moved onto
    the database's: a ToolError's ``retry.not_before``, a success's
    ``verification.checked_at``, a lookup's ``checked_at``."""
    if not offset:
        return outcome
    if isinstance(outcome, LookedUp):
        result = outcome.result
        moved = dataclasses.replace(result, checked_at=result.checked_at + offset)
        return dataclasses.replace(outcome, result=moved)
    envelope = outcome.envelope
    if isinstance(envelope, ToolError):
        if envelope.retry.not_before is None:
            return outcome
        retry = envelope.retry.model_copy(update={"not_before": envelope.retry.not_before + offset})
        return dataclasses.replace(outcome, envelope=envelope.model_copy(update={"retry": retry}))
    verification = envelope.verification.model_copy(
        update={"checked_at": envelope.verification.checked_at + offset}
    )
    return dataclasses.replace(
        outcome, envelope=envelope.model_copy(update={"verification": verification})
    )
