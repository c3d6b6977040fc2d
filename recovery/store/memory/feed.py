"""The memory store's change feed: fired by its tables for every event they append."""

from __future__ import annotations

import threading

from toolsafe.recovery.store.feed import ANY, Subscription, Watcher


class MemoryFeed:
    """The in-memory store's feed: its tables fire it for every event they append, so
    a waiter wakes without any polling (the in-memory twin of LISTEN/NOTIFY)."""

    def __init__(self) -> None:
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._watchers: list[Watcher] = []
        self._lock = threading.Lock()

    def subscribe(self, operation_ref: str) -> Subscription:
        subscription = Subscription(self, operation_ref)
        with self._lock:
            self._subscriptions.setdefault(operation_ref, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            found = self._subscriptions.get(subscription.operation_ref)
            if found is not None:
                found.discard(subscription)
                if not found:
                    del self._subscriptions[subscription.operation_ref]

    def watch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def waiting(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._subscriptions.values())

    def changed(self, operation_ref: str) -> None:
        """Wake every waiter of ``operation_ref`` (they re-read their step), and every
        waiter of :data:`ANY`; tell every watcher."""
        with self._lock:
            found = [*self._subscriptions.get(operation_ref, ()), *self._subscriptions.get(ANY, ())]
            watchers = list(self._watchers)
        for subscription in found:
            subscription.fire()
        for watcher in watchers:
            watcher(operation_ref)

    def close(self, timeout: float = 5.0) -> None:
        """Nothing runs behind this feed: nothing to stop."""
