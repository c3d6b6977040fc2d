"""The memory backend: the port in dicts and lists behind one lock, with no I/O.

``store`` holds :class:`MemoryStore` (``tables`` its rows, compare-and-set and undo log,
``sweep`` the sweeper's and heartbeat's methods, ``outbox`` the escalation notices);
``feed`` its change feed; ``backend`` what ``open_store`` opens for ``memory://``. It
imports the ground floor only, never the SQL backend.
"""

from toolsafe.recovery.store.memory.store import MemoryStore

__all__ = ["MemoryStore"]
