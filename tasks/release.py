"""The release timer: parked delays go out to the broker a lookahead before they fall due.

A retry or a verification due later than ``TOOLSAFE_MAX_ETA`` is not published when it
is decided: the step waits in the store (``waiting_retry`` or ``verifying`` with its
``due_at``), and workers hold none of it in memory. This thread, in the sweeper's
process (beat's, ``celery -A toolsafe beat`` or a worker's ``-B``), publishes each such
hint ``max_eta`` before it is due, with its due time as ETA (``sweeper.release``). The
hint reaches a worker ahead of time and runs at ``due_at`` as precisely as a plain
Celery ETA, while no worker holds more than ``max_eta`` of the future; a backlog of
10^5 waiting steps costs worker memory nothing and never blocks due work behind held
ETA messages (docs/operations.md, "Delays").

Every release is a compare-and-set on ``published_at`` in the store, so several timers
(two beats by mistake, and every sweep, which releases too) never publish a hint twice
for one due time; a hint lost after its release is re-published by the sweep's
``due_work`` rule. The timer survives a database or broker outage: it logs and tries
again at its next tick.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

from toolsafe.tasks import sweeper
from toolsafe.tasks.follow_up import Hints
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.release")

# The timer's tick: a quarter of the lookahead, at most a second. A step parked at any
# moment is then released at least three quarters of ``max_eta`` before it is due.
MAX_TICK: Final = 1.0


def tick_for(max_eta: float) -> float:
    """Seconds between two releases for a lookahead of ``max_eta``."""
    return min(MAX_TICK, max_eta / 4)


class ReleaseTimer:
    """The thread that runs ``sweeper.release`` every ``tick`` seconds until stopped."""

    def __init__(self, runtime: Runtime, hints: Hints, tick: float | None = None) -> None:
        self.runtime = runtime
        self.hints = hints
        self.tick = tick if tick is not None else tick_for(runtime.settings.broker.max_eta)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.released = 0  # hints published so far (for the log and the tests)
        self._failing = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="toolsafe-release-timer", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def release_once(self) -> int:
        """One release; a failure (database or broker down) is logged, never raised."""
        try:
            released = sweeper.release(self.runtime, self.hints, self.runtime.now())
        except Exception as error:  # the timer outlives outages; the next tick retries
            if not self._failing:
                log.warning(
                    "release timer: cannot release parked delays: %s",
                    type(error).__name__,
                    extra={"event": "release_failed"},
                )
            self._failing = True
            return 0
        if self._failing:
            log.info("release timer: releasing again", extra={"event": "release_resumed"})
            self._failing = False
        if released:
            self.released += released
            log.info(
                "released %d parked delays",
                released,
                extra={"event": "released", "released": released},
            )
        return released

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            self.release_once()
