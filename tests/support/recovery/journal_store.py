"""A store backend written in the tests, as a user's package would write one: the
memory store under a scheme of its own (``journal://``), which also keeps a journal of
the operation_ref of every event it commits, and has none of the optional features.

``register()`` serves ``journal://`` in this process (``register_store``); the entry
point form a package would use is checked in ``tests/unit/test_store_backends.py``.
"""

from __future__ import annotations

from toolsafe.recovery.store import Backend, Jitter, StoreOptions, register_store
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.memory.feed import MemoryFeed

SCHEME = "journal"
OPENER = "tests.support.recovery.journal_store:open_journal"


class JournalFeed(MemoryFeed):
    """The memory feed, noting each operation_ref it is told of before it wakes anyone."""

    def __init__(self) -> None:
        super().__init__()
        self.journal: list[str] = []

    def changed(self, operation_ref: str) -> None:
        self.journal.append(operation_ref)
        super().changed(operation_ref)


class JournalStore(MemoryStore):
    """The memory store with a :class:`JournalFeed`: ``journal`` lists, in commit order,
    the operation_ref of every event written."""

    def __init__(self, *, rng: Jitter | None = None) -> None:
        super().__init__(rng=rng)
        self.feed: JournalFeed = JournalFeed()
        self._tables.on_event = self.feed.changed

    @property
    def journal(self) -> list[str]:
        return list(self.feed.journal)


def open_journal(url: str, options: StoreOptions) -> Backend:
    """Each ``journal://`` URL opens a new, empty store."""
    return Backend(SCHEME, JournalStore())


def register() -> None:
    register_store(SCHEME, OPENER)
