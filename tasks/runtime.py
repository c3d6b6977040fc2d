"""What a process needs to run steps: settings, adapters, the store and its policies.

The store (and its database engine) is built lazily and again after a fork, so a
prefork worker child never shares its parent's connections. A store handed in (the
in-memory one of the unit tests) is used as it is.
"""

from __future__ import annotations

import os
import random
import threading
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

from toolsafe.adapters.protocol import Adapter
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.owners import this_process
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.secrets import SecretBox, open_without_keys
from toolsafe.recovery.store import StepStore, StorePort
from toolsafe.recovery.store.feed import ChangeFeed, Feed
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.settings import Settings
from toolsafe.tasks.faults import Faults

_RUNTIMES: weakref.WeakSet[Runtime] = weakref.WeakSet()


def utcnow() -> datetime:
    return datetime.now(UTC)


def open_store(database_url: str, *, pre_ping: bool = True) -> StepStore:
    """A store on a new engine for this process.

    ``pre_ping=False`` saves a round trip per transaction: a connection that died while
    pooled (a database restart) then fails its first statement, and the store's
    infrastructure retry (``with_db_retry``) runs the transaction again on a fresh one,
    which is safe because every write is a guarded compare-and-set. Only for processes
    that use the engine through the store alone (a worker's pool processes).
    """
    from toolsafe.recovery.db import make_engine

    return StepStore(make_engine(database_url, pool_pre_ping=pre_ping))


class Runtime:
    """Per-process state behind one app: adapters, store, policies, faults."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: StorePort | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.settings = settings
        self.faults = Faults(settings.faults_enabled, settings.fault_plan, settings.fault_state_dir)
        self._lock = threading.Lock()
        self._registry: Registry | None = registry
        self._given = store
        self._store: StepStore | None = None
        self._feed: ChangeFeed | None = None
        self._pid = os.getpid()
        self._rng = random.Random()
        # A worker's pool process reaches the database through the store only: no ping.
        self._pre_ping = True
        # Built once per tool: the settings never change, and this is on the hot path.
        self._policies: dict[str, Policy] = {}
        self.secret_box = SecretBox(settings.secret_keys) if settings.secret_keys else None
        _RUNTIMES.add(self)

    @property
    def registry(self) -> Registry:
        with self._lock:
            if self._registry is None:
                registry = Registry()
                registry.load_modules(
                    self.settings.adapter_modules, self.settings.adapter_settings()
                )
                self._registry = registry
            return self._registry

    @property
    def store(self) -> StorePort:
        if self._given is not None:
            return self._given
        with self._lock:
            if self._pid != os.getpid():
                self._forget_store()
            if self._store is None:
                self._store = open_store(self.settings.database_url, pre_ping=self._pre_ping)
            return self._store

    @property
    def feed(self) -> Feed:
        """The process's change feed over the store (push completion for waiters)."""
        store = self.store
        if isinstance(store, MemoryStore):
            return store.feed
        if not isinstance(store, StepStore):  # pragma: no cover - the two stores there are
            raise TypeError(f"no change feed for {type(store).__name__}")
        with self._lock:
            if self._feed is None or self._feed.engine is not store.engine:
                self._feed = ChangeFeed(store.engine, self.settings.notify_poll_interval)
            return self._feed

    @property
    def rng(self) -> random.Random:
        if self._pid != os.getpid():
            self.after_fork()
        return self._rng

    def after_fork(self) -> None:
        """Drop what the parent process opened; called in each new worker process."""
        with self._lock:
            self._forget_store()

    def close(self) -> None:
        """Close this process's database connections (the runtime stays usable)."""
        with self._lock:
            if self._feed is not None and self._pid == os.getpid():
                self._feed.close()
            self._feed = None
            if self._store is not None and self._pid == os.getpid():
                self._store.engine.dispose()
            self._store = None

    def _forget_store(self) -> None:
        # The inherited engine's sockets belong to the parent: never close them here.
        self._store = None
        self._feed = None
        self._pid = os.getpid()
        self._rng = random.Random()

    @property
    def owner(self) -> str:
        """The lease owner name of this process: host, pid, start time, pid namespace
        (``toolsafe.recovery.owners``), so a reused pid is never taken for it."""
        return str(this_process())

    def adapter(self, tool: str) -> Adapter[Any]:
        return self.registry.get(tool)

    def traits_for(self, tool: str) -> ToolTraits:
        if tool not in self.registry:
            # A step whose adapter this process does not load is treated as a write
            # that cannot be looked up: its unknown outcomes escalate, never re-run.
            return ToolTraits(writes=True, has_lookup=False)
        adapter = self.adapter(tool)
        return ToolTraits(
            writes=adapter.writes,
            has_lookup=adapter.has_lookup,
            consistency_window=adapter.consistency_window,
            longest_call=timedelta(seconds=self.settings.task_time_limit),
        )

    def open_input(self, stored: dict[str, Any]) -> dict[str, Any]:
        """A stored input with its sealed secret fields decrypted (``SecretKeyError``
        when no key opens them)."""
        if self.secret_box is None:
            return open_without_keys(stored)
        return self.secret_box.open(stored)

    def policy_for(self, tool: str) -> Policy:
        policy = self._policies.get(tool)
        if policy is None:
            policy = self._policies[tool] = self.settings.policy_for(tool)
        return policy


def reset_after_fork() -> None:
    """Every runtime of this process forgets its parent's store (worker_process_init);
    a pool process's new engine does not ping (``open_store``)."""
    for runtime in list(_RUNTIMES):
        runtime._pre_ping = False
        runtime.after_fork()
