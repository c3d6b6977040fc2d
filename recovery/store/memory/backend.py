"""The memory backend as :func:`~toolsafe.recovery.store.backend.open_store` opens it for
``memory://``: a new, empty store that lives as long as its process, with none of the
optional features (the status page, keys, metrics and purge need a database)."""

from __future__ import annotations

from toolsafe.recovery.store.backend import Backend, StoreOptions
from toolsafe.recovery.store.memory.store import MemoryStore

__all__ = ["memory_backend", "open_memory"]


def memory_backend(store: MemoryStore | None = None) -> Backend:
    """The backend around ``store`` (a new one when None)."""
    return Backend("memory", store if store is not None else MemoryStore())


def open_memory(url: str, options: StoreOptions) -> Backend:
    """Every ``memory://`` URL opens a store of its own (nothing is shared by name)."""
    return memory_backend()
