"""Push completion: one change feed per store tells waiters that their step changed.

This is what every backend's feed shares: the :class:`Feed` protocol and the
:class:`Subscription` a waiter holds. The SQL store's feed (``sql/feed.py``) listens
for PostgreSQL's NOTIFY or polls SQLite's event rows; the memory store's
(``memory/feed.py``) is fired by its tables as they append each event.

A waiter subscribes *before* it reads its step, then waits on the subscription: a
change committed between the read and the wait still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Final, Protocol

ANY: Final = "*"
"""Subscribe to this to hear of every step's changes (the status page's overview); no
operation_ref can be ``*``."""


Watcher = Callable[[str | None], None]
"""Told each changed step's operation_ref, or None when any step may have changed
unheard (the feed's connection was down); called on the feed's own thread, so it must
return at once."""


class Feed(Protocol):
    """What waiters use of a change feed (``ChangeFeed`` over SQL, ``MemoryFeed``): a
    subscription per waiter, and how many wait; a watcher per process-wide listener (the
    hint relay). ``close`` stops what the feed runs."""

    def subscribe(self, operation_ref: str) -> Subscription: ...

    def unsubscribe(self, subscription: Subscription) -> None: ...

    def watch(self, watcher: Watcher) -> None: ...

    def unwatch(self, watcher: Watcher) -> None: ...

    def waiting(self) -> int: ...

    def close(self, timeout: float = 5.0) -> None: ...


class Subscription:
    """One waiter's interest in one operation_ref; wakes threads and event loops."""

    def __init__(self, feed: Feed, operation_ref: str) -> None:
        self.feed = feed
        self.operation_ref = operation_ref
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def fire(self) -> None:
        self._event.set()
        with self._lock:
            loops = list(self._loops)
        for loop, event in loops:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(event.set)

    def wait(self, timeout: float) -> bool:
        """Block until a change (True) or the timeout (False); resets for the next one."""
        fired = self._event.wait(max(0.0, timeout))
        self._event.clear()
        return fired

    async def wait_async(self, timeout: float) -> bool:
        """As :meth:`wait`, awaiting without holding a thread; cancel-safe."""
        if self._event.is_set():
            self._event.clear()
            return True
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._loops.append(entry)
        try:
            if self._event.is_set():  # fired between the check and the registration
                return True
            try:
                await asyncio.wait_for(event.wait(), max(0.0, timeout))
            except TimeoutError:
                return False
            return True
        finally:
            with self._lock:
                self._loops.remove(entry)
            self._event.clear()

    def close(self) -> None:
        self.feed.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
