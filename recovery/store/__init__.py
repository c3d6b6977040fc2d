"""The durable step store: its port, the SQLAlchemy Core implementation and an
in-memory one.

``port`` holds the :class:`StorePort` Protocol every caller is typed against; ``steps``
holds :class:`StepStore` (``ops`` the guarded statements, ``sql`` their dialect-specific
forms, ``sweep`` the sweeper's queries, ``outbox`` the escalation notices owed to
handlers); ``memory`` holds :class:`MemoryStore` (``tables`` its dicts, lists and
compare-and-set).
"""

from __future__ import annotations

from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.outbox import Outbox, OutboxNotice
from toolsafe.recovery.store.port import CountSources, EventSummary, StepSummary, StorePort
from toolsafe.recovery.store.steps import (
    CONCURRENT_CHANGE,
    Claim,
    EventRecord,
    InvalidOperationRef,
    Jitter,
    OperationRefConflict,
    Recorded,
    StepNotFound,
    StepRecord,
    StepStore,
    Submitted,
    Validator,
    new_operation_ref,
)

__all__ = [
    "CONCURRENT_CHANGE",
    "Claim",
    "CountSources",
    "EventRecord",
    "EventSummary",
    "InvalidOperationRef",
    "Jitter",
    "MemoryStore",
    "OperationRefConflict",
    "Outbox",
    "OutboxNotice",
    "Recorded",
    "StepNotFound",
    "StepRecord",
    "StepStore",
    "StepSummary",
    "StorePort",
    "Submitted",
    "Validator",
    "new_operation_ref",
]
