"""The hint relay (``TOOLSAFE_SUBMIT_HINTS=relay``): submitted steps' hints published
from the store, so that a submit is its commit alone.

With the relay on, a submit stores its step pending with no hint out (``published_at``
None) and answers once that is committed (R2). Every worker's main process runs one
relay thread. It watches the store's change feed (PostgreSQL's NOTIFY of each event
row, SQLite's poll of them, the memory store's own calls), and for the steps it hears
of it takes those still pending and unsent (``StorePort.take_hints``: marked published
in one statement, each step to one relay however many run) and publishes their hints in
one batch. Nothing extra is written per submit: the ``submitted`` event's notification
is the wake-up. Each step is looked up once per relay: a step's later events (claimed,
executed) notify too, and the relay remembers the last ``REMEMBERED`` steps it looked
up, so their notifications cost no query.

What can go wrong, and what covers it (R7):

- the broker refuses a batch: its steps are unsent again (``hints_not_sent``) and the
  relay tries again after a pause, doubling up to ``MAX_PAUSE``;
- the relay dies between its mark and its publish: those steps look published; the
  sweeper re-sends them once ``republish_after`` has passed (``due_work``), as it does
  for a submitter that died after its commit without the relay;
- a notification is lost (the feed's connection dropped, no relay ran): after a
  reconnect, at its start and every ``catch_up`` seconds the relay takes every unsent
  step, a batch at a time; the sweeper's ``due_work`` sends unsent steps too.

A hint that arrives twice is harmless (R1): the claim runs a step once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.relay")

CATCH_UP: Final = 5.0
"""Seconds between two catch-ups (every unsent step taken, heard of or not)."""
REMEMBERED: Final = 65536
"""How many looked-up operation_refs a relay remembers (their later events are skipped)."""
FIRST_PAUSE: Final = 0.2
MAX_PAUSE: Final = 5.0


class BatchHints(Protocol):
    """What the relay publishes through (``tasks.app.Publisher``)."""

    def execute_many(
        self,
        steps: Sequence[tuple[str, str]],
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None: ...


class HintRelay:
    """The thread that publishes the hints of steps stored unsent, until stopped."""

    def __init__(self, runtime: Runtime, hints: BatchHints, *, catch_up: float = CATCH_UP) -> None:
        if catch_up <= 0:
            raise ValueError(f"catch_up must be positive, got {catch_up}")
        self.runtime = runtime
        self.hints = hints
        self.catch_up = catch_up
        self.relayed = 0  # hints published so far (for the log and the tests)
        self._lock = threading.Lock()
        self._heard_refs: set[str] = set()
        # Steps already looked up (taken or found sent), oldest first; the relay's thread only.
        self._looked_up: OrderedDict[str, None] = OrderedDict()
        self._everything = True  # the first round takes every unsent step
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pause = 0.0  # after a failure: how long before the next round

    def start(self) -> None:
        if self._thread is None:
            self.runtime.feed.watch(self._heard)
            self._thread = threading.Thread(target=self._run, name="toolsafe-relay", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.runtime.feed.unwatch(self._heard)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _heard(self, operation_ref: str | None) -> None:
        """The feed's callback (its thread): remember, wake the relay, return."""
        with self._lock:
            if operation_ref is None:
                self._everything = True
            else:
                self._heard_refs.add(operation_ref)
        self._wake.set()

    def relay_once(self) -> int:
        """One round: the unsent steps heard of (or every one, when a catch-up is due)
        taken and published. Returns how many hints went out; a failure is logged,
        put back for the next round and never raised."""
        with self._lock:
            refs, self._heard_refs = self._heard_refs, set()
            everything, self._everything = self._everything, False
        limit = self.runtime.settings.sweep.batch
        sent = 0
        try:
            if everything:
                while True:  # a batch at a time, each published before the next is taken
                    batch = self._take(limit, None)
                    sent += len(batch)
                    if len(batch) < limit:
                        break
            else:
                ordered = sorted(ref for ref in refs if ref not in self._looked_up)
                for first in range(0, len(ordered), limit):
                    chunk = ordered[first : first + limit]
                    sent += len(self._take(len(chunk), chunk))
                    self._remember(chunk)
        except Exception as error:  # the relay outlives outages; the next round retries
            with self._lock:
                self._everything = True  # what was heard is not lost: take everything
            self._failed(error)
            self.relayed += sent  # the batches published before the failure
            return sent
        if self._pause:
            log.info("hint relay: relaying again", extra={"event": "relay_resumed"})
            self._pause = 0.0
        self.relayed += sent
        return sent

    def _remember(self, refs: Sequence[str]) -> None:
        looked_up = self._looked_up
        for ref in refs:
            looked_up[ref] = None
        while len(looked_up) > REMEMBERED:
            looked_up.popitem(last=False)

    def _take(self, limit: int, refs: Sequence[str] | None) -> list[tuple[str, str]]:
        """Steps taken and their hints published; a refused publish unsends them."""
        store = self.runtime.store
        stamp = self.runtime.now()
        taken = store.take_hints(stamp, limit, refs)
        if not taken:
            return taken
        for ref, _tool in taken:
            self.runtime.faults.hit("after_relay_take", ref)
        try:
            self.hints.execute_many(taken)
        except Exception:
            # Unsent again for the next round; should this fail too, the sweeper re-sends
            # them once ``republish_after`` has passed (R7).
            store.hints_not_sent([ref for ref, _ in taken], stamp)
            raise
        return taken

    def _failed(self, error: Exception) -> None:
        if not self._pause:
            log.warning(
                "hint relay: cannot publish the hints of unsent steps: %s",
                type(error).__name__,
                extra={"event": "relay_failed"},
            )
        self._pause = min(MAX_PAUSE, max(FIRST_PAUSE, self._pause * 2))

    def _run(self) -> None:
        next_catch_up = time.monotonic()
        while not self._stop.is_set():
            if self._pause:
                self._stop.wait(self._pause)
            else:
                self._wake.wait(max(0.0, next_catch_up - time.monotonic()))
            if self._stop.is_set():
                break
            self._wake.clear()
            if time.monotonic() >= next_catch_up:
                with self._lock:
                    self._everything = True
                next_catch_up = time.monotonic() + self.catch_up
            self.relay_once()
