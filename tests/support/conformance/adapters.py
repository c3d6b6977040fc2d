"""Adapters the kit's tests run it against: three deliberately broken HTTP adapters, a
broken and a sound ``@tool`` function; ``register(registry)`` registers the HTTP ones
(``toolsafe check-adapter tests.support.conformance.adapters:<tool>``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import httpx

from toolsafe import Raised, tool
from toolsafe.adapters import codes
from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.http import HttpSettings, Observed
from toolsafe.adapters.protocol import LookupNotFound, LookupResult
from toolsafe.adapters.registry import Registry

PLACEHOLDER = "http://127.0.0.1:9"  # check-adapter --base-url names the real service


class TimeoutNotCommitted(CreateInvoice):
    """Broken: calls a read timeout "nothing was written", so the runtime would send the
    invoice again although the first one may have been created."""

    tool: ClassVar[str] = "timeout_not_committed"

    def classify_exception(
        self, error: BaseException, operation_ref: str, attempts_left: int
    ) -> ToolError:
        if isinstance(error, httpx.ReadTimeout):
            return self.error(
                codes.DEPENDENCY_UNAVAILABLE,
                operation_ref,
                {"reason": "read_timeout"},
                not_before=datetime.now(UTC) + timedelta(seconds=2),
                attempts_left=attempts_left,
            )
        return super().classify_exception(error, operation_ref, attempts_left)


class AbsentWhenDown(CreateInvoice):
    """Broken: every answer but a 200 reads as "not there", a 503 included."""

    tool: ClassVar[str] = "absent_when_down"

    def parse_lookup(self, observed: Observed, operation_ref: str) -> LookupResult:
        if observed.status != 200:
            return LookupNotFound(checked_at=observed.received_at)
        return super().parse_lookup(observed, operation_ref)


class EchoesUpstream(CreateInvoice):
    """Broken: copies the downstream's error text into agent_message."""

    tool: ClassVar[str] = "echoes_upstream"

    def body_error(
        self,
        body: Mapping[str, Any],
        observed: Observed,
        operation_ref: str,
        attempts_left: int,
        *,
        success: bool,
    ) -> ToolError:
        envelope = super().body_error(body, observed, operation_ref, attempts_left, success=success)
        return envelope.model_copy(update={"agent_message": observed.text()[:400]})


def register(registry: Registry) -> None:
    settings = HttpSettings(base_url=PLACEHOLDER)
    for adapter in (TimeoutNotCommitted, AbsentWhenDown, EchoesUpstream):
        registry.register(adapter(settings))


# --- function adapters over an in-process ledger (the "SDK") -------------------------
class RateLimited(Exception):
    """What the ledger SDK raises when it throttles; may carry ``retry_after``."""


_LOCK = threading.Lock()
_CHARGES: dict[str, list[dict[str, Any]]] = {}


def _charge(customer_id: str, amount_cents: int, key: str) -> dict[str, Any]:
    with _LOCK:
        held = _CHARGES.setdefault(key, [])
        if not held:
            held.append({"id": f"ch_{sum(map(len, _CHARGES.values())) + 1}", "key": key})
        return held[0]


def _find(key: str) -> list[dict[str, Any]]:
    with _LOCK:
        return list(_CHARGES.get(key, []))


@tool(
    lookup=_find,
    errors={ConnectionRefusedError: codes.DEPENDENCY_UNAVAILABLE, RateLimited: codes.RATE_LIMITED},
    timeout=0.5,
)
def ledger_charge(customer_id: str, amount_cents: int, operation_ref: str) -> dict[str, Any]:
    """Charge a customer on the ledger, once per operation_ref."""
    return _charge(customer_id, amount_cents, key=operation_ref)


@tool(
    lookup=_find,
    # Broken: "any network error means it did not go through" - a reset after the
    # request left is a network error too.
    errors={OSError: Raised(codes.DEPENDENCY_UNAVAILABLE)},
)
def network_error_retried(
    customer_id: str, amount_cents: int, operation_ref: str
) -> dict[str, Any]:
    """Charge a customer, calling every OSError a retryable failure."""
    return _charge(customer_id, amount_cents, key=operation_ref)
