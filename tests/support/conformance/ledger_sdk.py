"""Function adapters over a vendor-style SDK that talks HTTP to the example service's
invoices: the target comes from their settings (``TOOLSAFE_LEDGER_BASE_URL``), so the kit
can point them at staging and put its proxy in between.

``sdk_charge`` is sound: the SDK's ``LedgerRefused`` (connect refused, nothing sent) is
the only exception it maps. ``sdk_charge_retried`` is broken (d): the SDK turns every
transport failure into ``LedgerUnavailable`` (its class says nothing of timeouts, so the
decorator cannot refuse it), and the adapter calls that "nothing written"."""

from __future__ import annotations

from typing import Any, Final

import httpx
from pydantic import BaseModel, ConfigDict, Field

from toolsafe import tool
from toolsafe.adapters import codes
from toolsafe.adapters.function import FunctionAdapter
from toolsafe.adapters.registry import AdapterSettings, Registry
from toolsafe.adapters.sending import KeyPlace

KEY: Final = KeyPlace("header", "Idempotency-Key")


class LedgerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(default="http://127.0.0.1:9", pattern=r"^https?://\S+$")
    timeout: float = Field(default=1.0, gt=0, le=60)


ADAPTER_SETTINGS: Final = AdapterSettings(prefix="LEDGER", model=LedgerSettings, target="base_url")


class LedgerRefused(Exception):
    """The SDK could not connect: nothing was sent."""


class LedgerUnavailable(Exception):
    """The SDK's error for any other transport failure."""


class LedgerClient:
    """Stands in for a vendor's SDK."""

    def __init__(self, settings: LedgerSettings) -> None:
        self.http = httpx.Client(base_url=settings.base_url, timeout=settings.timeout)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            raise LedgerRefused from error
        except httpx.TransportError as error:
            raise LedgerUnavailable from error

    def charge(self, customer_id: str, amount_cents: int, key: str) -> dict[str, Any]:
        body = {"customer_id": customer_id, "amount_cents": amount_cents, "currency": "EUR"}
        reply = self._send("POST", "/invoices", json=body, headers={"Idempotency-Key": key})
        reply.raise_for_status()
        record: dict[str, Any] = reply.json()["record"]
        return record

    def find(self, key: str) -> list[dict[str, Any]]:
        """Every invoice stored under the key ([] when none): the service's search."""
        reply = self._send("GET", "/search/invoices", params={"operation_ref": key})
        reply.raise_for_status()
        found = reply.json()
        if not isinstance(found, list):
            raise LedgerUnavailable("the search did not answer a list")
        return found


def make_adapters(client: LedgerClient) -> tuple[FunctionAdapter, FunctionAdapter]:
    @tool(
        lookup=client.find,
        errors={LedgerRefused: codes.DEPENDENCY_UNAVAILABLE},
        idempotency_place=KEY,
    )
    def sdk_charge(customer_id: str, amount_cents: int, operation_ref: str) -> dict[str, Any]:
        """Charge through the ledger SDK, once per operation_ref."""
        return client.charge(customer_id, amount_cents, key=operation_ref)

    @tool(
        name="sdk_charge_retried",
        lookup=client.find,
        errors={
            LedgerRefused: codes.DEPENDENCY_UNAVAILABLE,
            LedgerUnavailable: codes.DEPENDENCY_UNAVAILABLE,
        },
        idempotency_place=KEY,
    )
    def retried(customer_id: str, amount_cents: int, operation_ref: str) -> dict[str, Any]:
        """Charge through the SDK, calling every transport failure retryable."""
        return client.charge(customer_id, amount_cents, key=operation_ref)

    return sdk_charge, retried


def register(registry: Registry, settings: LedgerSettings | None = None) -> None:
    client = LedgerClient(settings or LedgerSettings())
    for adapter in make_adapters(client):
        registry.register(adapter)
