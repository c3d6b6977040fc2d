"""The durable step store: the port and what every backend shares on the ground floor,
each backend a folder above it.

``port`` holds :class:`StorePort`, the Protocol every caller is typed against;
``shared`` the definitions every backend uses (jitter, validator, the event of a
change, the escalation notice); ``errors`` the store's error catalogue; ``submission``
the checks made before a write; ``actions`` the agents' and operators' actions; ``feed``
the change feed's protocol and subscriptions; ``keys``, ``overview``, ``tally`` and
``retention`` the optional features' ports and records; ``backend`` :func:`open_store`,
which picks the backend by the URL's scheme. ``sql/`` (PostgreSQL, SQLite) and
``memory/`` are the backends; neither imports the other, and nothing here imports them.
"""

from __future__ import annotations

from toolsafe.recovery.reasons import CONCURRENT_CHANGE
from toolsafe.recovery.records import (
    Claim,
    CountSources,
    EventRecord,
    EventSummary,
    NewStep,
    Recorded,
    Refused,
    StepRecord,
    StepSummary,
    Submitted,
)
from toolsafe.recovery.store.backend import (
    Backend,
    StoreOptions,
    known_schemes,
    open_store,
    register_store,
)
from toolsafe.recovery.store.errors import (
    FeatureMissing,
    InvalidOperationRef,
    OperationRefConflict,
    StepNotFound,
    UnknownStore,
)
from toolsafe.recovery.store.port import OutboxPort, StorePort
from toolsafe.recovery.store.shared import Jitter, OutboxNotice, Validator
from toolsafe.recovery.store.submission import new_operation_ref

__all__ = [
    "CONCURRENT_CHANGE",
    "Backend",
    "Claim",
    "CountSources",
    "EventRecord",
    "EventSummary",
    "FeatureMissing",
    "InvalidOperationRef",
    "Jitter",
    "NewStep",
    "OperationRefConflict",
    "OutboxNotice",
    "OutboxPort",
    "Recorded",
    "Refused",
    "StepNotFound",
    "StepRecord",
    "StepSummary",
    "StoreOptions",
    "StorePort",
    "Submitted",
    "UnknownStore",
    "Validator",
    "known_schemes",
    "new_operation_ref",
    "open_store",
    "register_store",
]
