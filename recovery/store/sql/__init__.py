"""The SQL backend: SQLAlchemy Core over PostgreSQL or SQLite.

``steps`` holds :class:`StepStore` (``ops`` its guarded statements, ``statements`` the
compare-and-set and event primitives, ``compiled`` the hot statements run on the
driver's cursor, ``batch`` a batch submit, ``sweep`` and ``leases`` the sweeper's and
heartbeat's queries, ``outbox`` the escalation notices); ``feed`` the change feed;
``keys``, ``overview``, ``tally`` and ``retention`` the optional features; ``backend``
what ``open_store`` opens. Nothing outside the store imports this folder but tests and
benchmarks.
"""

from toolsafe.recovery.store.sql.steps import StepStore

__all__ = ["StepStore"]
