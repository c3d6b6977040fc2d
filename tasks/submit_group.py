"""Concurrent single submits in one process share one transaction (group commit).

Each ``Client.submit_call`` checks its call in its own thread, then hands the prepared
step to the process's ``SubmitGroup``. One caller at a time is the group's leader: it
waits up to ``TOOLSAFE_SUBMIT_WINDOW`` for other callers to join (only when others are
submitting at the same moment: a lone caller never waits), commits every queued step of
the same actor in ONE transaction (``StorePort.submit_many``), publishes their hints in
one batch, and only then answers each of them. Nothing is acknowledged before it is
durable (R2): a caller returns after the commit that holds its step.

A call the shared transaction refuses must not sink the others: when ``submit_many``
raises (a conflicting operation_ref, say), nothing of it was committed, and every caller
of that group runs its own ``submit`` instead, so only the refused call gets its error.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from toolsafe.recovery.records import NewStep
from toolsafe.recovery.store import Submitted

# Steps one shared transaction takes at most; the rest wait for the next one.
MAX_GROUP: Final = 200

Commit = Callable[[Sequence[NewStep], str | None], list[Submitted]]


@dataclass
class _Waiting:
    call: NewStep
    actor: str | None
    done: bool = False
    submitted: Submitted | None = None  # None once done: submit alone
    event: threading.Event = field(default_factory=threading.Event)


class SubmitGroup:
    """Group commit for one client's submits (thread-safe)."""

    def __init__(self, window: float, commit: Commit) -> None:
        self.window = window
        self._commit = commit
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._leading = False
        self._active = 0  # submits in progress right now (``entered``)

    def submit(self, call: NewStep, actor: str | None) -> Submitted | None:
        """The call committed together with whoever else was submitting; None when the
        shared transaction failed (a call of the group refused, the database away):
        nothing of it was committed, and the caller submits alone, getting its own step
        or its own error."""
        mine = _Waiting(call, actor)
        with self._lock:
            self._queue.append(mine)
        while True:
            with self._lock:
                if mine.done:
                    return mine.submitted
                lead = not self._leading
                if lead:
                    self._leading = True
            if lead:
                self._lead()
            else:
                mine.event.wait(timeout=0.05)
                mine.event.clear()

    @contextlib.contextmanager
    def entered(self) -> Iterator[bool]:
        """Count a submit in progress (grouped or alone) for as long as it runs; yields
        whether others were in progress when it came (only then is a group worth it)."""
        with self._lock:
            others = self._active > 0
            self._active += 1
        try:
            yield others
        finally:
            with self._lock:
                self._active -= 1

    def _lead(self) -> None:
        """One shared transaction for the queued calls of the first one's actor."""
        group: list[_Waiting] = []
        try:
            if self.window > 0 and self._others_submitting():
                time.sleep(self.window)  # let the callers submitting right now join
            with self._lock:
                actor = self._queue[0].actor
                group = [w for w in self._queue if w.actor == actor][:MAX_GROUP]
                taken = {id(w) for w in group}
                self._queue = [w for w in self._queue if id(w) not in taken]
            results: Sequence[Submitted | None]
            try:
                results = self._commit([w.call for w in group], actor)
            except Exception:  # nothing of it committed: each caller alone
                results = [None] * len(group)
            for waiting, result in zip(group, results, strict=True):
                waiting.submitted = result
        finally:
            with self._lock:
                self._leading = False
                for waiting in group:
                    waiting.done = True
                    waiting.event.set()
                if self._queue:
                    self._queue[0].event.set()  # the next leader

    def _others_submitting(self) -> bool:
        with self._lock:
            return self._active > 1
