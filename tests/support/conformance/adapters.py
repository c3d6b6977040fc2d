"""Adapters the kit's tests run it against: one broken the way real authors break them
for each class of the issue — (a) a queued answer taken as success, (b) any 404 taken as
absent, (c) the key never sent, (d) a read timeout made into a retryable 503 (and an
SDK's timeout mapped to "nothing written", in ``ledger_sdk``), (e) a fresh key on every
call — and two more (a lookup absent when down,
upstream text echoed), plus a sound ``@tool`` function. ``register(registry)`` registers
the HTTP ones (``toolsafe check-adapter tests.support.conformance.adapters:<tool>``);
(f) is the sound example against a downstream that ignores the key."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
from pydantic import JsonValue

from toolsafe import tool
from toolsafe.adapters import codes
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.http import HttpSettings, Observed
from toolsafe.adapters.protocol import CallContext, LookupNotFound, LookupResult
from toolsafe.adapters.registry import Registry

PLACEHOLDER = "http://127.0.0.1:9"  # check-adapter --base-url names the real service


class QueuedIsSuccess(CreateInvoice):
    """Broken (a): takes a 202 "queued" as the stored invoice, with evidence made up
    from the operation_ref, although nothing proves the record exists."""

    tool: ClassVar[str] = "queued_is_success"

    def classify_response(
        self, observed: Observed, operation_ref: str, attempts_left: int
    ) -> AnySuccess | ToolError:
        if observed.status == 202:
            return ToolSuccess[JsonValue](
                operation_ref=operation_ref,
                result={},
                verification=Verification(
                    checked_at=datetime.now(UTC), evidence_ref=f"accepted:{operation_ref}"
                ),
            )
        return super().classify_response(observed, operation_ref, attempts_left)


class AnyNotFoundAbsent(CreateInvoice):
    """Broken (b): every 404 means "not there", a missing route's and a proxy's too."""

    tool: ClassVar[str] = "any_404_absent"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = None


class KeyNeverSent(CreateInvoice):
    """Broken (c): sends the operation_ref under a header the service does not read."""

    tool: ClassVar[str] = "key_never_sent"

    def headers(self, operation_ref: str, context: CallContext) -> dict[str, str]:
        return {"X-Request-Id": operation_ref, "Accept": "application/json"}


class SlowAnswerRetried(CreateInvoice):
    """Broken (d), past the registration probe: turns a read timeout into a made-up 503
    with Retry-After before the toolkit's classification sees it, so the runtime would
    send the invoice again although the first one may have been created."""

    tool: ClassVar[str] = "slow_answer_retried"

    def exchange(self, request: httpx.Request) -> Observed:
        try:
            return super().exchange(request)
        except httpx.ReadTimeout:
            headers = httpx.Headers({"Retry-After": "2"})
            return Observed(503, headers, b"", datetime.now(UTC))


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
    for adapter in (QueuedIsSuccess, AnyNotFoundAbsent, KeyNeverSent, SlowAnswerRetried,
                    AbsentWhenDown, EchoesUpstream):  # fmt: skip
        registry.register(adapter(settings))


# --- function adapters over an in-process ledger (the "SDK") -------------------------
class RateLimited(Exception):
    """What the ledger SDK raises when it throttles; may carry ``retry_after``."""


_LOCK = threading.Lock()
# operation_ref → the charges recorded under it; the ledger de-duplicates by ``key``.
_CHARGES: dict[str, list[dict[str, Any]]] = {}
_KEYS: dict[str, dict[str, Any]] = {}


def _charge(customer_id: str, amount_cents: int, key: str, ref: str) -> dict[str, Any]:
    with _LOCK:
        held = _KEYS.get(key)
        if held is None:
            held = {"id": f"ch_{len(_KEYS) + 1}", "key": key, "operation_ref": ref}
            _KEYS[key] = held
            _CHARGES.setdefault(ref, []).append(held)
        return held


def _find(ref: str) -> list[dict[str, Any]]:
    with _LOCK:
        return list(_CHARGES.get(ref, []))


@tool(
    lookup=_find,
    errors={ConnectionRefusedError: codes.DEPENDENCY_UNAVAILABLE, RateLimited: codes.RATE_LIMITED},
    timeout=0.5,
)
def ledger_charge(customer_id: str, amount_cents: int, operation_ref: str) -> dict[str, Any]:
    """Charge a customer on the ledger, once per operation_ref."""
    return _charge(customer_id, amount_cents, key=operation_ref, ref=operation_ref)


@tool(lookup=_find, timeout=0.5)
def fresh_key_charge(customer_id: str, amount_cents: int, operation_ref: str) -> dict[str, Any]:
    """Broken (e): records the operation_ref, but gives the ledger a fresh idempotency
    key on every call, so a retry charges again."""
    key = f"{operation_ref}#{uuid.uuid4().hex[:8]}"
    return _charge(customer_id, amount_cents, key=key, ref=operation_ref)
