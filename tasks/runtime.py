"""What a process needs to run steps: settings, adapters, the store and its policies.

The store is opened lazily from its URL (``open_store``: the backend its scheme names)
and again after a fork, so a prefork worker child never shares its parent's
connections. A backend handed in (the in-memory one of the unit tests) is used as it
is, and never closed here.

``runtime.now()`` is the one clock every ``now`` handed to the store or to ``decide``
comes from: the database's time, as this process measures it (``tasks/clock.py``).
``utcnow()`` is this process's own wall clock, for what never meets the store's times.
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
from toolsafe.recovery.store import Backend, StoreOptions, StorePort, open_store
from toolsafe.recovery.store.feed import Feed
from toolsafe.settings import Settings
from toolsafe.tasks.clock import Clock
from toolsafe.tasks.faults import Faults

_RUNTIMES: weakref.WeakSet[Runtime] = weakref.WeakSet()


def utcnow() -> datetime:
    """This process's own wall clock; the store's times use ``Runtime.now()``."""
    return datetime.now(UTC)


class Runtime:
    """Per-process state behind one app: adapters, store, policies, faults."""

    def __init__(
        self,
        settings: Settings,
        *,
        backend: Backend | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.settings = settings
        self.faults = Faults(
            settings.faults.enabled, settings.faults.plan, settings.faults.state_dir
        )
        self._lock = threading.Lock()
        self._registry: Registry | None = registry
        self._given = backend
        self._backend: Backend | None = None
        self._pid = os.getpid()
        self._rng = random.Random()
        # A worker's pool process reaches the database through the store only: no ping.
        self._pre_ping = True
        # Built once per tool: the settings never change, and this is on the hot path.
        self._policies: dict[str, Policy] = {}
        self.secret_box = (
            SecretBox(settings.tools.secret_keys) if settings.tools.secret_keys else None
        )
        # The database's clock, measured from this process (offset 0 on a same-host store).
        self.clock = Clock(self._database_time)
        _RUNTIMES.add(self)

    @property
    def registry(self) -> Registry:
        with self._lock:
            if self._registry is None:
                registry = Registry()
                registry.load_modules(
                    self.settings.tools.adapter_modules, self.settings.adapter_settings()
                )
                self._registry = registry
            return self._registry

    @property
    def backend(self) -> Backend:
        """The store this process opened from ``TOOLSAFE_DATABASE_URL`` (``open_store``),
        or the one handed in: its steps, feed and optional features."""
        if self._given is not None:
            return self._given
        with self._lock:
            if self._pid != os.getpid():
                self._forget_store()
            if self._backend is None:
                options = StoreOptions(
                    pre_ping=self._pre_ping, poll_interval=self.settings.store.notify_poll_interval
                )
                self._backend = open_store(self.settings.store.url, options)
            return self._backend

    def now(self) -> datetime:
        """The database's time now: what every ``now`` handed to the store or to
        ``decide`` is (``tasks/clock.py``)."""
        return self.clock.now()

    def _database_time(self) -> datetime | None:
        """The database's time, or None when its clock is this machine's (SQLite, the
        memory store) or the backend cannot tell (no ``clock`` feature)."""
        backend = self.backend
        if not backend.has("clock") or backend.clock.same_host:
            return None
        return backend.clock.database_time()

    @property
    def store(self) -> StorePort:
        return self.backend.steps

    @property
    def feed(self) -> Feed:
        """The process's change feed over the store (push completion for waiters)."""
        return self.backend.feed

    @property
    def rng(self) -> random.Random:
        if self._pid != os.getpid():
            self.after_fork()
        return self._rng

    def after_fork(self) -> None:
        """Drop what the parent process opened; called in each new worker process."""
        with self._lock:
            self._forget_store()
        self.clock.after_fork()

    def close(self) -> None:
        """Close this process's database connections (the runtime stays usable)."""
        with self._lock:
            if self._backend is not None and self._pid == os.getpid():
                self._backend.close()
            self._backend = None

    def _forget_store(self) -> None:
        # The inherited engine's sockets belong to the parent: never close them here.
        self._backend = None
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
            longest_call=timedelta(seconds=self.settings.calls.time_limit),
            deduplicates_by_key=adapter.deduplicates_by_key,
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
            policy = self._policies[tool] = self.settings.policies.for_tool(tool)
        return policy


def reset_after_fork() -> None:
    """Every runtime of this process forgets its parent's store (worker_process_init);
    a pool process's new store does not ping its connections (``StoreOptions``)."""
    for runtime in list(_RUNTIMES):
        runtime._pre_ping = False
        runtime.after_fork()
