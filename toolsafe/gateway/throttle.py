"""Bad tokens cost the gateway little: failed key checks are limited per key id and
source address, and the scrypt verifications of tokens not yet known run a few at a time
(docs/gateway.md, "Limits").

:class:`FailureWindow` keeps, per (key id, source), the times of its recent failed
checks: once ``limit`` of them fall within ``window`` seconds, the next check for that
key id from that source is refused before any verification, until the oldest is
``window`` seconds old. A check counts from its start (so a burst cannot slip past the
count while its verifications wait), is forgotten if it never ran, and a success forgets
that source's failures for the key. :class:`Verifiers` bounds the verifications running
at once, in threads of their own, and the requests waiting for one. Neither touches a
token already verified: that is answered from the authenticator's cache.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final, TypeVar

import anyio.to_thread

__all__ = ["MAX_BUCKETS", "WAITING_PER_VERIFIER", "FailureWindow", "Throttled", "Verifiers"]

MAX_BUCKETS: Final = 10_000
"""The (key id, source) pairs remembered at most; beyond it the longest idle goes first."""
WAITING_PER_VERIFIER: Final = 32
"""Requests that may wait for each verifier; more are refused at once (``Retry-After: 1``)."""

T = TypeVar("T")


class Throttled(Exception):
    """A check refused before any verification ran; ``retry_after`` in whole seconds."""

    def __init__(self, code: str, detail: str, retry_after: float) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail
        self.retry_after = max(1, math.ceil(retry_after))


class FailureWindow:
    """At most ``limit`` failed (or running) checks per (key id, source) in any
    ``window`` seconds; ``clock`` is injected by tests."""

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        max_buckets: int = MAX_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or window <= 0 or max_buckets < 1:
            raise ValueError("limit, window and max_buckets must be positive")
        self.limit = limit
        self.window = window
        self.max_buckets = max_buckets
        self.clock = clock
        self._lock = threading.Lock()
        # (key id, source) -> start times of its recent checks, oldest first; the dict is
        # ordered by the latest check, so the longest idle pair is first.
        self._buckets: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def begin(self, key_id: str, source: str) -> float:
        """Count a check about to run and return its stamp for :meth:`end`;
        :class:`Throttled` (``TOO_MANY_BAD_KEYS``) when the pair has used its window."""
        now = self.clock()
        pair = (key_id, source)
        with self._lock:
            self._evict(now)
            stamps = self._buckets.get(pair)
            if stamps is None:
                stamps = self._buckets[pair] = deque()
            while stamps and stamps[0] <= now - self.window:
                stamps.popleft()
            if len(stamps) >= self.limit:
                raise Throttled(
                    "TOO_MANY_BAD_KEYS",
                    f"{len(stamps)} failed key checks for key id {key_id} from this address "
                    f"within {self.window:g}s (TOOLSAFE_GATEWAY_AUTH_FAILURES); "
                    "retry after Retry-After",
                    stamps[0] + self.window - now,
                )
            stamps.append(now)
            self._buckets.move_to_end(pair)
        return now

    def end(self, key_id: str, source: str, stamp: float, *, ok: bool | None) -> None:
        """The check's outcome: ``True`` (the key verified) forgets this source's
        failures for the key, ``False`` keeps the check counted, ``None`` (it never
        verified anything: cancelled, refused, the store down) uncounts it."""
        pair = (key_id, source)
        with self._lock:
            stamps = self._buckets.get(pair)
            if stamps is None or ok is False:
                return
            if ok:
                del self._buckets[pair]
                return
            with contextlib.suppress(ValueError):  # already out of the window
                stamps.remove(stamp)
            if not stamps:
                del self._buckets[pair]

    def _evict(self, now: float) -> None:
        """Drop the pairs whose checks are all older than the window, then, while still
        full, the longest idle ones (memory stays bounded whatever the flood)."""
        cutoff = now - self.window
        while self._buckets:
            stamps = next(iter(self._buckets.values()))
            if stamps and stamps[-1] > cutoff:
                break
            self._buckets.popitem(last=False)
        while len(self._buckets) >= self.max_buckets:
            self._buckets.popitem(last=False)


class Verifiers:
    """At most ``size`` verifications at once, each in a thread of their own (so waiting
    ones hold no thread of the shared pool), and at most ``size`` ×
    :data:`WAITING_PER_VERIFIER` requests waiting for one. Used on the event loop only."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be positive")
        self.size = size
        self.pending = 0  # running or waiting
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, verify: Callable[[], T]) -> T:
        if self.pending >= self.size * (1 + WAITING_PER_VERIFIER):
            raise Throttled(
                "TOO_MANY_KEY_CHECKS",
                f"{self.pending} key checks are running or waiting already "
                "(TOOLSAFE_GATEWAY_AUTH_VERIFIERS); retry after Retry-After",
                1,
            )
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.size)
        self.pending += 1
        try:
            return await anyio.to_thread.run_sync(verify, limiter=self._limiter)
        finally:
            self.pending -= 1
