"""``send_email``: a write to the example downstream; the recipient's syntax is checked
locally so that a malformed address never leaves the worker."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.adapters import codes
from toolsafe.adapters.http import HttpSettings, HttpWriteAdapter
from toolsafe.adapters.protocol import FieldError

# Deliberately plain: one @, a dotted domain, no spaces or quotes. Deliverability is
# the downstream's call (it answers INVALID_RECIPIENT_ADDRESS), syntax is ours.
RECIPIENT: Final = re.compile(
    r"^[A-Za-z0-9.!#$%&*+/=?^_`{|}~\-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)+$"
)

UPSTREAM_CODES: Final = {
    "INVALID_RECIPIENT_ADDRESS": codes.INVALID_RECIPIENT_ADDRESS,
    "INVALID_SUBJECT": codes.UPSTREAM_VALIDATION_FAILED,
    "RATE_LIMITED": codes.RATE_LIMITED,
    "VERSION_CONFLICT": codes.VERSION_CONFLICT,
    "MISSING_APPROVAL": codes.MISSING_APPROVAL,
    "IDEMPOTENCY_KEY_IN_FLIGHT": codes.IDEMPOTENCY_KEY_IN_FLIGHT,
    "IDEMPOTENCY_KEY_REUSED": codes.IDEMPOTENCY_KEY_REUSED,
}


class EmailInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipient_email: str = Field(max_length=254)
    subject: str = Field(min_length=1, max_length=200)
    body: str = Field(default="", max_length=10_000)


class EmailResult(BaseModel):
    """What a sent e-mail's result holds (the subject is echoed, so it is cleaned too)."""

    id: str | int
    subject: str | None = Field(default=None, max_length=200)
    created_at: str | None = Field(default=None, max_length=40)


class SendEmail(HttpWriteAdapter[EmailInput]):
    """Sends one e-mail per operation_ref, looked up by operation_ref."""

    tool: ClassVar[str] = "send_email"
    title: ClassVar[str | None] = "Send an e-mail"
    description: ClassVar[str] = (
        "Sends one e-mail to a recipient address. A write: repeating the call with the "
        "same operation_ref never sends a second e-mail."
    )
    input_model: ClassVar[type[BaseModel]] = EmailInput
    result_model: ClassVar[type[BaseModel] | None] = EmailResult
    has_lookup: ClassVar[bool] = True
    path: ClassVar[str] = "/emails"
    lookup_path: ClassVar[str | None] = "/emails"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = frozenset({"NOT_FOUND"})
    # The lookup says how many records hold the key: the conformance kit counts effects.
    lookup_count_field: ClassVar[str | None] = "count"
    upstream_codes = UPSTREAM_CODES
    record_key: ClassVar[str | None] = "record"
    result_fields: ClassVar[tuple[str, ...]] = ("id", "subject", "created_at")

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
        self.consistency_window = consistency_window  # type: ignore[misc]

    def check(self, parsed: EmailInput) -> list[FieldError]:
        if not RECIPIENT.fullmatch(parsed.recipient_email):
            return [FieldError(field="recipient_email", code=codes.INVALID_RECIPIENT_ADDRESS)]
        return []
