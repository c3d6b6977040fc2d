"""The memory backend as :func:`~toolsafe.recovery.store.backend.open_store` opens it for
``memory://``: a new, empty store that lives as long as its process, with its clock (the
process's own: ``same_host``) and none of the other optional features (the status page,
keys, metrics and purge need a database)."""

from __future__ import annotations

from datetime import UTC, datetime

from toolsafe.recovery.store.backend import Backend, StoreOptions
from toolsafe.recovery.store.memory.store import MemoryStore

__all__ = ["MemoryClock", "memory_backend", "open_memory"]


class MemoryClock:
    """The memory store's time is its process's: nothing to measure."""

    same_host = True

    def database_time(self) -> datetime:
        return datetime.now(UTC)


def memory_backend(store: MemoryStore | None = None) -> Backend:
    """The backend around ``store`` (a new one when None)."""
    return Backend("memory", store if store is not None else MemoryStore(), clock=MemoryClock())


def open_memory(url: str, options: StoreOptions) -> Backend:
    """Every ``memory://`` URL opens a store of its own (nothing is shared by name)."""
    return memory_backend()
