"""``create_invoice``: a write to the example downstream, verified through
``get_invoice_by_operation_ref`` (a GET by operation_ref)."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.adapters import codes
from toolsafe.adapters.http import HttpSettings, HttpWriteAdapter
from toolsafe.adapters.protocol import LookupResult

UPSTREAM_CODES: Final = {
    "INVALID_CUSTOMER": codes.UPSTREAM_VALIDATION_FAILED,
    "INVALID_AMOUNT": codes.UPSTREAM_VALIDATION_FAILED,
    "INVALID_CURRENCY": codes.UPSTREAM_VALIDATION_FAILED,
    "RATE_LIMITED": codes.RATE_LIMITED,
    "VERSION_CONFLICT": codes.VERSION_CONFLICT,
    "MISSING_APPROVAL": codes.MISSING_APPROVAL,
    "IDEMPOTENCY_KEY_IN_FLIGHT": codes.IDEMPOTENCY_KEY_IN_FLIGHT,
    "IDEMPOTENCY_KEY_REUSED": codes.IDEMPOTENCY_KEY_REUSED,
}


class InvoiceInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    customer_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")
    amount_cents: int = Field(gt=0, le=100_000_000)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    memo: str | None = Field(default=None, max_length=500)


class InvoiceResult(BaseModel):
    """What a created invoice's result holds; anything else the downstream says is dropped."""

    id: str | int
    customer_id: str | None = Field(default=None, max_length=100)
    amount_cents: int | None = None
    currency: str | None = Field(default=None, max_length=3)
    created_at: str | None = Field(default=None, max_length=40)


class CreateInvoice(HttpWriteAdapter[InvoiceInput]):
    """Creates one invoice per operation_ref; the downstream de-duplicates by the key."""

    tool: ClassVar[str] = "create_invoice"
    title: ClassVar[str | None] = "Create an invoice"
    description: ClassVar[str] = (
        "Creates one invoice for a customer (amount in cents, ISO-4217 currency). "
        "A write: repeating the call with the same operation_ref never creates a second "
        "invoice."
    )
    input_model: ClassVar[type[BaseModel]] = InvoiceInput
    result_model: ClassVar[type[BaseModel] | None] = InvoiceResult
    has_lookup: ClassVar[bool] = True
    path: ClassVar[str] = "/invoices"
    lookup_path: ClassVar[str | None] = "/invoices"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = frozenset({"NOT_FOUND"})
    # The lookup says how many records hold the key: the conformance kit counts effects.
    lookup_count_field: ClassVar[str | None] = "count"
    upstream_codes = UPSTREAM_CODES
    record_key: ClassVar[str | None] = "record"
    result_fields: ClassVar[tuple[str, ...]] = (
        "id", "customer_id", "amount_cents", "currency", "created_at",
    )  # fmt: skip

    def __init__(
        self,
        settings: HttpSettings,
        consistency_window: timedelta = timedelta(seconds=2),
        *,
        deduplicates_by_key: bool | None = None,
    ) -> None:
        super().__init__(settings)
        # Only for a downstream run without --naive (``ExampleSettings``); None keeps
        # what the class declares.
        if deduplicates_by_key is not None:
            self.deduplicates_by_key = deduplicates_by_key  # type: ignore[misc]
        # An instance attribute: the window is the deployed downstream's, set at register.
        self.consistency_window = consistency_window  # type: ignore[misc]

    def get_invoice_by_operation_ref(self, operation_ref: str) -> LookupResult:
        return self.lookup(operation_ref)
