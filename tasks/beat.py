"""Beat's scheduler: Celery's persistent one, with one log line per broker outage.

Celery's own logs a traceback for every sweep it cannot publish (about 2 KB each, every
sweep interval while the broker is down). This one says once that the broker cannot be
reached, skips the sweeps of the outage with a back-off (doubling from the sweep
interval up to :data:`MAX_BACKOFF`; a skipped sweep is harmless, the next one re-reads
the store), and says once when publishing works again.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from celery.beat import PersistentScheduler, ScheduleEntry

log = logging.getLogger("toolsafe.beat")

MAX_BACKOFF: Final = 60.0


class Scheduler(PersistentScheduler):  # type: ignore[misc]
    """``toolsafe beat``'s scheduler (``beat_scheduler``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outage_since: float | None = None
        self.backoff = 0.0
        self.next_try = 0.0
        self.skipped = 0

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        now = time.monotonic()
        if self.outage_since is not None and now < self.next_try:
            self.skipped += 1
            return
        log.info("Scheduler: Sending due task %s (%s)", entry.name, entry.task)
        try:
            self.apply_async(entry, producer=producer, advance=False)
        except Exception as error:  # beat outlives every publish failure
            self._failed(entry, error, now)
            return
        if self.outage_since is not None:
            log.warning(
                "beat: the broker is reachable again after %.0fs; %d sends skipped, "
                "sending %s again",
                now - self.outage_since,
                self.skipped,
                entry.name,
                extra={"event": "beat_resumed", "skipped": self.skipped},
            )
            self.outage_since = None
            self.skipped = 0
            self.backoff = 0.0

    def _failed(self, entry: ScheduleEntry, error: BaseException, now: float) -> None:
        interval = max(float(getattr(entry.schedule, "seconds", 1.0) or 1.0), 0.5)
        self.backoff = min(MAX_BACKOFF, self.backoff * 2 if self.backoff else interval)
        self.next_try = now + self.backoff
        if self.outage_since is None:
            self.outage_since = now
            text = str(error).strip().splitlines()
            log.error(
                "beat: cannot send %s, the broker cannot be reached (%s: %s); trying again "
                "with back-off up to %.0fs, one line when it is back",
                entry.name,
                type(error).__name__,
                text[0][:200] if text else "",
                MAX_BACKOFF,
                extra={"event": "beat_broker_down"},
            )
        else:
            self.skipped += 1
