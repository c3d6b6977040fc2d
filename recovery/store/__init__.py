"""The durable step store: one class over SQLAlchemy Core, its statements and sweeps.

``steps`` holds :class:`StepStore`; ``ops`` the guarded statements, ``sql`` their
dialect-specific forms, ``sweep`` the sweeper's queries, ``outbox`` the escalation
notices owed to handlers.
"""

from __future__ import annotations

from toolsafe.recovery.store.outbox import Outbox, OutboxNotice
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
    "EventRecord",
    "InvalidOperationRef",
    "Jitter",
    "OperationRefConflict",
    "Outbox",
    "OutboxNotice",
    "Recorded",
    "StepNotFound",
    "StepRecord",
    "StepStore",
    "Submitted",
    "Validator",
    "new_operation_ref",
]
