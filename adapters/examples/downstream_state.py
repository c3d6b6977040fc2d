"""The example downstream's state: records, idempotency keys, effect counts and the
injected faults, all behind one lock (served by ``toolsafe.adapters.examples.downstream``)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

RESOURCES: Final = ("invoices", "emails")
FAULTS: Final = frozenset(
    {
        "stall_before_store",
        "stall_after_store",
        "error_after_store",
        "drop_before_store",
        "drop_after_store",
        "rate_limit",
        "unavailable",
        "version_conflict",
        "require_approval",
        "lookup_down",
        "eventual_consistency",
        "respond",
    }
)
BEFORE_STORE: Final = frozenset(
    {
        "rate_limit",
        "unavailable",
        "version_conflict",
        "require_approval",
        "drop_before_store",
        "stall_before_store",
    }
)
AFTER_STORE: Final = frozenset(
    {"stall_after_store", "error_after_store", "drop_after_store", "respond"}
)
DOWNSTREAM_CODES: Final[Mapping[str, str]] = {
    "BAD_CONTENT_LENGTH": "the request's Content-Length is not a number",
    "BODY_TOO_LARGE": "the request body exceeds the service's limit",
    "MALFORMED_JSON": "the request body is not a JSON object",
    "NOT_FOUND": "no record (or route) for what was asked",
    "MISSING_OPERATION_REF": "a lookup without the operation_ref parameter",
    "BAD_FAULT": "a fault injected through the control API is not valid",
    "IDEMPOTENCY_KEY_IN_FLIGHT": "a request with this key is still being processed",
    "IDEMPOTENCY_KEY_REUSED": "the key was used before for a different payload",
    "RATE_LIMITED": "too many requests; Retry-After says when to come back",
    "VERSION_CONFLICT": "the record changed since it was read",
    "MISSING_APPROVAL": "the operation needs an approval reference header",
    "INVALID_CUSTOMER": "customer_id is missing or empty",
    "INVALID_AMOUNT": "amount_cents is not a positive amount",
    "INVALID_CURRENCY": "currency is not three capital letters",
    "INVALID_RECIPIENT_ADDRESS": "recipient_email is malformed or its domain takes no mail",
    "INVALID_SUBJECT": "the e-mail subject is missing",
}
"""The example service's own error codes (a downstream's vocabulary, not toolsafe's: the
example adapters translate them into envelope codes)."""
APPROVAL_HEADER: Final = "X-Approval-Ref"
MAX_BODY: Final = 1_048_576
_EMAIL: Final = re.compile(r"^[^@\s]+@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+)$")
# Domains that "do not accept mail": the reserved names of RFC 2606/6761 and a typo.
UNDELIVERABLE_SUFFIXES: Final = (".invalid", ".test", ".localhost", ".example", "exmaple.com")


@dataclass
class Fault:
    """One injected fault; ``times`` ``None`` means until cleared."""

    id: int
    fault: str
    operation_ref: str | None
    resource: str | None
    times: int | None
    params: dict[str, Any]

    def matches(self, resource: str, operation_ref: str | None) -> bool:
        return (self.resource in (None, resource)) and (
            self.operation_ref is None or self.operation_ref == operation_ref
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "fault": self.fault,
            "operation_ref": self.operation_ref or "*",
            "resource": self.resource,
            "times": self.times,
            **self.params,
        }


@dataclass
class Record:
    id: str
    resource: str
    operation_ref: str | None
    payload: dict[str, Any]
    payload_hash: str
    created_at: datetime
    visible_at: datetime
    approval_ref: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "operation_ref": self.operation_ref,
            "created_at": self.created_at.isoformat(),
            "approval_ref": self.approval_ref,
            **self.payload,
        }


@dataclass
class State:
    """Everything the service holds; every access goes through ``lock``."""

    naive: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    records: dict[str, list[Record]] = field(default_factory=lambda: {r: [] for r in RESOURCES})
    by_key: dict[tuple[str, str], Record] = field(default_factory=dict)
    in_flight: dict[tuple[str, str], str] = field(default_factory=dict)
    effects: Counter[str] = field(default_factory=Counter)
    effects_by_resource: dict[str, Counter[str]] = field(
        default_factory=lambda: {r: Counter() for r in RESOURCES}
    )
    # Requests per operation_ref that the key deduplicated (never counted when naive):
    # answered with the stored record, or refused while the key was in flight.
    deduplicated: Counter[str] = field(default_factory=Counter)
    faults: list[Fault] = field(default_factory=list)
    next_fault: int = 1
    next_record: int = 1
    # The W3C traceparent each request for an operation_ref carried (writes and lookups),
    # so a test can follow one call's trace to here (docs/tracing.md).
    traceparents: dict[str, list[str]] = field(default_factory=dict)

    def reset(self) -> None:
        with self.lock:
            self.records = {r: [] for r in RESOURCES}
            self.by_key.clear()
            self.in_flight.clear()
            self.effects.clear()
            self.deduplicated.clear()
            self.effects_by_resource = {r: Counter() for r in RESOURCES}
            self.faults.clear()
            self.traceparents.clear()

    def saw_trace(self, operation_ref: str | None, traceparent: str | None) -> None:
        """Note the ``traceparent`` a request for ``operation_ref`` carried, if any."""
        if operation_ref and traceparent:
            with self.lock:
                self.traceparents.setdefault(operation_ref, []).append(traceparent[:100])

    def add_fault(self, spec: dict[str, Any]) -> Fault:
        name = spec.get("fault")
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
        ref = spec.get("operation_ref")
        if ref is not None and not isinstance(ref, str):
            raise ValueError("operation_ref must be a string or '*'")
        resource = spec.get("resource")
        if resource is not None and resource not in RESOURCES:
            raise ValueError(f"resource must be one of {', '.join(RESOURCES)}")
        times = spec.get("times", 1)
        if times is not None and (not isinstance(times, int) or times < 1):
            raise ValueError("times must be a positive integer or null (until cleared)")
        reserved = {"fault", "operation_ref", "resource", "times"}
        params = {k: v for k, v in spec.items() if k not in reserved}
        with self.lock:
            fault = Fault(
                self.next_fault, str(name), None if ref in (None, "*") else ref, resource, times,
                params,
            )  # fmt: skip
            self.next_fault += 1
            self.faults.append(fault)
        return fault

    def clear_fault(self, fault: Fault) -> None:
        """Lift one fault injected "until cleared" (a no-op once it was used up)."""
        with self.lock:
            self.faults = [held for held in self.faults if held.id != fault.id]

    def take_fault(self, names: frozenset[str], resource: str, ref: str | None) -> Fault | None:
        """The first matching fault of ``names``, one use consumed."""
        with self.lock:
            for fault in self.faults:
                if fault.fault in names and fault.matches(resource, ref):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self.faults.remove(fault)
                    return fault
        return None

    def peek_fault(self, name: str, resource: str, ref: str | None) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.fault == name and fault.matches(resource, ref):
                    return fault
        return None


def payload_hash(payload: dict[str, Any]) -> str:
    encoded = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def validate_payload(resource: str, payload: dict[str, Any]) -> tuple[str, str] | None:
    """``(code, field)`` of the first problem, or ``None``."""
    if resource == "invoices":
        if not isinstance(payload.get("customer_id"), str) or not payload["customer_id"]:
            return "INVALID_CUSTOMER", "customer_id"
        amount = payload.get("amount_cents")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
            return "INVALID_AMOUNT", "amount_cents"
        currency = payload.get("currency")
        if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
            return "INVALID_CURRENCY", "currency"
        return None
    address = payload.get("recipient_email")
    match = _EMAIL.fullmatch(address) if isinstance(address, str) else None
    if match is None or match.group(1).lower().endswith(UNDELIVERABLE_SUFFIXES):
        return "INVALID_RECIPIENT_ADDRESS", "recipient_email"
    if not isinstance(payload.get("subject"), str):
        return "INVALID_SUBJECT", "subject"
    return None
