"""What a process needs to run steps: settings, adapters, the store and its policies.

The store (and its database engine) is built lazily and again after a fork, so a
prefork worker child never shares its parent's connections.
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
from toolsafe.recovery.store import StepStore
from toolsafe.settings import Settings
from toolsafe.tasks.faults import Faults

_RUNTIMES: weakref.WeakSet[Runtime] = weakref.WeakSet()


def utcnow() -> datetime:
    return datetime.now(UTC)


def open_store(database_url: str) -> StepStore:
    """A store on a new engine for this process."""
    from toolsafe.recovery.db import make_engine

    return StepStore(make_engine(database_url))


class Runtime:
    """Per-process state behind one app: adapters, store, policies, faults."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.faults = Faults(settings.faults_enabled, settings.fault_plan, settings.fault_state_dir)
        self._lock = threading.Lock()
        self._registry: Registry | None = None
        self._store: StepStore | None = None
        self._pid = os.getpid()
        self._rng = random.Random()
        # Built once per tool: the settings never change, and this is on the hot path.
        self._policies: dict[str, Policy] = {}
        _RUNTIMES.add(self)

    @property
    def registry(self) -> Registry:
        with self._lock:
            if self._registry is None:
                registry = Registry()
                registry.load_modules(self.settings.adapter_modules)
                self._registry = registry
            return self._registry

    @property
    def store(self) -> StepStore:
        with self._lock:
            if self._pid != os.getpid():
                self._forget_store()
            if self._store is None:
                self._store = open_store(self.settings.database_url)
            return self._store

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
            if self._store is not None and self._pid == os.getpid():
                self._store.engine.dispose()
            self._store = None

    def _forget_store(self) -> None:
        # The inherited engine's sockets belong to the parent: never close them here.
        self._store = None
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

    def policy_for(self, tool: str) -> Policy:
        policy = self._policies.get(tool)
        if policy is None:
            policy = self._policies[tool] = self.settings.policy_for(tool)
        return policy


def reset_after_fork() -> None:
    """Every runtime of this process forgets its parent's store (worker_process_init)."""
    for runtime in list(_RUNTIMES):
        runtime.after_fork()
