"""Noticing that the broker lost what it held, so the sweeper re-sends only those hints.

A Redis restart without persistence drops every queued, unacknowledged and held ETA
message; a restart that reloads a snapshot drops what came after the snapshot; keys
deleted under a running server drop everything. The sweeper cannot ask Redis which
hints it lost, but it can tell *when*: it keeps a marker key in the broker's own
database, rewritten every sweep, holding the server's ``run_id`` and the time it was
written. The marker shares the hints' fate:

- marker there, same ``run_id``: the broker lost nothing since the last sweep;
- marker there, another ``run_id``: the server restarted and reloaded its data; the hints
  sent after the reloaded marker was written and before the server started are gone;
- marker gone, and this process saw it on the same server: its keys were deleted; every
  hint sent before now may be gone;
- marker gone otherwise (a fresh server, or a process that never looked): the hints
  sent before the server started are gone.

The window (``LossWindow``) is kept in the marker until the sweeper has handed out every
step whose hint went out inside it (``StorePort.lost_hints``, a batch per sweep), so a
recovery longer than one sweep survives the sweeper's process. Brokers other than Redis
have no marker: the sweeper falls back to re-sending stale hints (``due_work``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

log = logging.getLogger("toolsafe.broker_watch")

MARKER_KEY: Final = "toolsafe:broker-marker"


@dataclass(frozen=True)
class LossWindow:
    """Hints sent in ``[since, until)`` may be lost (``since`` None: from the start)."""

    since: datetime | None
    until: datetime

    def merged(self, other: LossWindow | None) -> LossWindow:
        if other is None:
            return self
        either_open = self.since is None or other.since is None
        since = None if either_open else min(self.since, other.since)  # type: ignore[type-var]
        return LossWindow(since, max(self.until, other.until))


@dataclass(frozen=True)
class Marker:
    run_id: str
    written_at: datetime
    recovering: LossWindow | None

    def dump(self) -> str:
        window = self.recovering
        return json.dumps(
            {
                "run_id": self.run_id,
                "written_at": self.written_at.isoformat(),
                "recovering": None
                if window is None
                else [None if window.since is None else window.since.isoformat(),
                      window.until.isoformat()],
            }
        )  # fmt: skip


POOL_WAIT: Final = 5.0
"""Seconds to wait for a connection of the app's broker pool before giving up."""


def pooled_connection(app: Any) -> Any:
    """A connection of ``app``'s broker pool, as a publish takes one (a sweep asks every
    few seconds, and a new connection each time cost as much as the sweep's queries);
    a pool still exhausted after ``POOL_WAIT`` raises, as a broker down does."""
    return app.pool.acquire(block=True, timeout=POOL_WAIT)


def parse_marker(raw: bytes | str | None) -> Marker | None:
    """The marker's value, or None when it is missing or not one of ours."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        recovering = data.get("recovering")
        window = None
        if recovering is not None:
            since, until = recovering
            window = LossWindow(
                None if since is None else datetime.fromisoformat(since),
                datetime.fromisoformat(until),
            )
        return Marker(str(data["run_id"]), datetime.fromisoformat(data["written_at"]), window)
    except (ValueError, TypeError, KeyError):
        return None


def judge(
    marker: Marker | None, run_id: str, started: datetime, now: datetime, seen: str | None
) -> LossWindow | None:
    """The window of hints the broker lost, from what the marker says (pure)."""
    pending = marker.recovering if marker is not None else None
    if marker is None:
        lost = LossWindow(None, now if seen == run_id else min(started, now))
    elif marker.run_id != run_id:
        lost = LossWindow(min(marker.written_at, started), min(started, now))
    else:
        return pending
    return lost.merged(pending)


TICK_WAIT: Final = 1.1
"""How long :func:`server_start` waits at most for Redis's uptime to tick."""


def server_start(client: Any, now: datetime, uptime: int) -> datetime:
    """When the Redis server started, to a few milliseconds. Redis counts its uptime in
    whole seconds, so ``now - uptime`` is up to a second late, and a hint sent to a new
    server in its first second would be judged lost: wait (at most ``TICK_WAIT``, only
    when the marker says the server changed) for the count to tick, and take its start
    from the tick."""
    begun = time.monotonic()
    while (waited := time.monotonic() - begun) < TICK_WAIT:
        ticked = int(client.info("server")["uptime_in_seconds"])
        if ticked != uptime:
            return now + timedelta(seconds=waited) - timedelta(seconds=ticked)
        time.sleep(0.005)
    return now - timedelta(seconds=uptime)


class BrokerWatch(Protocol):
    """What the sweeper asks the broker (``sweeper.sweep``)."""

    def losses(self, now: datetime) -> LossWindow | None:
        """The window of hints lost and not yet re-sent; None: nothing lost."""
        ...

    def recovered(self, window: LossWindow) -> None:
        """Every step whose hint went out in ``window`` has been handed out again."""
        ...


class RedisBrokerWatch:
    """The marker in a Redis broker's database, read and rewritten at each sweep."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._seen: str | None = None  # the run_id this process last saw the marker on

    def _call(self, work: Any) -> Any:
        with pooled_connection(self.app) as connection:
            if connection.transport.driver_type != "redis":
                return None
            return work(connection.default_channel.client)

    def losses(self, now: datetime) -> LossWindow | None:
        def look(client: Any) -> LossWindow | None:
            info = client.info("server")
            run_id = str(info["run_id"])
            marker = parse_marker(client.get(MARKER_KEY))
            if marker is not None and marker.run_id == run_id:
                started = now  # not needed: the broker lost nothing since the marker
            else:
                started = server_start(client, now, int(info["uptime_in_seconds"]))
            window = judge(marker, run_id, started, now, self._seen)
            self._seen = run_id
            client.set(MARKER_KEY, Marker(run_id, now, window).dump())
            return window

        try:
            found: LossWindow | None = self._call(look)
            return found
        except Exception as error:  # the sweep must run even when the broker can't say
            log.warning(
                "cannot read the broker marker: %s",
                type(error).__name__,
                extra={"event": "broker_marker_unknown"},
            )
            return None

    def recovered(self, window: LossWindow) -> None:
        def close(client: Any) -> None:
            marker = parse_marker(client.get(MARKER_KEY))
            if marker is not None and marker.recovering == window:
                client.set(MARKER_KEY, Marker(marker.run_id, marker.written_at, None).dump())

        try:
            self._call(close)
        except Exception as error:  # the next sweep finds the window again: harmless
            log.warning(
                "cannot update the broker marker: %s",
                type(error).__name__,
                extra={"event": "broker_marker_unknown"},
            )
