"""The SQL store's change feed.

On PostgreSQL every event row sends ``NOTIFY toolsafe_steps, '<operation_ref>'`` in the
transaction of the change (a trigger, ``recovery/schema.py``), so it arrives at the
commit and never before; one listening connection serves every waiter of the process.
Elsewhere (SQLite) one thread reads new event rows every ``poll_interval`` while anyone
waits. After a reconnect every waiter is woken to re-read its step, so a notification
lost with a dropped connection never loses a completion.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

from sqlalchemy import Engine, bindparam, func, select

from toolsafe.recovery.db import libpq_conninfo
from toolsafe.recovery.schema import STEP_CHANNEL, step_events
from toolsafe.recovery.store.feed import ANY, Subscription, Watcher

log = logging.getLogger("toolsafe.feed")

LISTENER_NAME: Final = "toolsafe-listen"
"""``application_name`` of the listening connection (operators can find it)."""
RECONNECT_DELAY: Final = 0.2
RECONNECT_MAX_DELAY: Final = 5.0
POLL_BATCH: Final = 1000

_NEW_EVENTS = (
    select(step_events.c.id, step_events.c.operation_ref)
    .where(step_events.c.id > bindparam("after"))
    .order_by(step_events.c.id)
    .limit(POLL_BATCH)
)
_LAST_EVENT = select(func.max(step_events.c.id))


class ChangeFeed:
    """The process's source of "step X changed"; started by the first subscription."""

    def __init__(self, engine: Engine, poll_interval: float = 0.05) -> None:
        self.engine = engine
        self.poll_interval = poll_interval
        self.listens = engine.dialect.name == "postgresql"
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._watchers: list[Watcher] = []
        self._lock = threading.Lock()
        self._active = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()
        # Counters for tests and the benchmark.
        self.notifications = 0
        self.reconnects = 0
        self.polls = 0

    # ------------------------------------------------------------------ waiters

    def subscribe(self, operation_ref: str) -> Subscription:
        subscription = Subscription(self, operation_ref)
        with self._lock:
            self._subscriptions.setdefault(operation_ref, set()).add(subscription)
            self._started()
        return subscription

    def watch(self, watcher: Watcher) -> None:
        """``watcher`` is told of every change from now on (and None after a reconnect:
        whatever committed meanwhile went unheard)."""
        with self._lock:
            self._watchers.append(watcher)
            self._started()

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def _started(self) -> None:
        """The feed's thread runs (with ``_lock`` held)."""
        self._active.notify_all()
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            target = self._listen if self.listens else self._poll
            self._thread = threading.Thread(target=target, name="toolsafe-feed", daemon=True)
            self._thread.start()

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            found = self._subscriptions.get(subscription.operation_ref)
            if found is not None:
                found.discard(subscription)
                if not found:
                    del self._subscriptions[subscription.operation_ref]

    def waiting(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._subscriptions.values())

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            self._active.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _dispatch(self, operation_ref: str) -> None:
        with self._lock:
            found = [*self._subscriptions.get(operation_ref, ()), *self._subscriptions.get(ANY, ())]
            watchers = list(self._watchers)
        for subscription in found:
            subscription.fire()
        for watcher in watchers:
            watcher(operation_ref)

    def _wake_all(self) -> None:
        with self._lock:
            found = [sub for subs in self._subscriptions.values() for sub in subs]
            watchers = list(self._watchers)
        for subscription in found:
            subscription.fire()
        for watcher in watchers:
            watcher(None)

    # ------------------------------------------------------------------ PostgreSQL

    def _dsn(self) -> str:
        # Every host of a multi-host URL and its target_session_attrs: after a failover
        # the reconnect finds the new primary.
        return libpq_conninfo(self.engine.url)

    def _listen(self) -> None:
        import psycopg

        delay = RECONNECT_DELAY
        first = True
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._dsn(),
                    autocommit=True,
                    application_name=LISTENER_NAME,
                    connect_timeout=5,
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                ) as conn:
                    conn.execute(f"LISTEN {STEP_CHANNEL}")
                    self.connected.set()
                    if not first:
                        self.reconnects += 1
                    first = False
                    delay = RECONNECT_DELAY
                    # Whatever committed while nobody listened: every waiter re-reads.
                    self._wake_all()
                    while not self._stop.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            self.notifications += 1
                            self._dispatch(notice.payload)
                            if self._stop.is_set():
                                break
            except psycopg.Error as error:
                self.connected.clear()
                log.warning(
                    "change feed connection lost: %s",
                    type(error).__name__,
                    extra={"event": "feed_reconnect"},
                )
                self._stop.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
        self.connected.clear()

    # ------------------------------------------------------------------ polling

    def _poll(self) -> None:
        last: int | None = None
        while not self._stop.is_set():
            with self._lock:
                while not (self._subscriptions or self._watchers or self._stop.is_set()):
                    last = None  # idle: no queries until someone waits again
                    self._active.wait()
            if self._stop.is_set():
                break
            try:
                with self.engine.connect() as conn:
                    if last is None:
                        last = int(conn.execute(_LAST_EVENT).scalar() or 0)
                        self.connected.set()
                        # Anything before this point is for each waiter's own first read.
                        self._wake_all()
                    rows = conn.execute(_NEW_EVENTS, {"after": last}).all()
                self.polls += 1
            except Exception as error:  # the database is down: try again, say so once
                self.connected.clear()
                last = None
                log.warning(
                    "change feed cannot poll: %s",
                    type(error).__name__,
                    extra={"event": "feed_poll_failed"},
                )
                self._stop.wait(RECONNECT_DELAY)
                continue
            for row in rows:
                last = max(last, int(row.id))
                self.notifications += 1
                self._dispatch(row.operation_ref)
            if len(rows) < POLL_BATCH:
                self._stop.wait(self.poll_interval)
