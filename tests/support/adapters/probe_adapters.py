"""Small adapters used by the classification tests: a write with and without lookup,
and a read, over whatever URL a test server has."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from toolsafe.adapters import codes
from toolsafe.adapters.http import HttpReadAdapter, HttpSettings, HttpWriteAdapter

FAST = {
    "connect_timeout": 0.3,
    "write_timeout": 0.3,
    "read_timeout": 0.3,
    "pool_timeout": 0.2,
}


def settings(url: str, **overrides: object) -> HttpSettings:
    values: dict[str, object] = {**FAST, **overrides}
    return HttpSettings(base_url=url, **values)  # type: ignore[arg-type]


class ProbeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    amount: int = 1


class ProbeWrite(HttpWriteAdapter[ProbeInput]):
    tool: ClassVar[str] = "probe_write"
    input_model: ClassVar[type[BaseModel]] = ProbeInput
    has_lookup: ClassVar[bool] = True
    consistency_window: ClassVar[timedelta] = timedelta(seconds=1)
    path: ClassVar[str] = "/things"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = frozenset({"NOT_FOUND"})
    upstream_codes: ClassVar[Mapping[str, str]] = {
        "BAD_NAME": codes.UPSTREAM_VALIDATION_FAILED,
        "INVALID_RECIPIENT_ADDRESS": codes.INVALID_RECIPIENT_ADDRESS,
        "VERSION_CONFLICT": codes.VERSION_CONFLICT,
        "MISSING_APPROVAL": codes.MISSING_APPROVAL,
        "IDEMPOTENCY_KEY_IN_FLIGHT": codes.IDEMPOTENCY_KEY_IN_FLIGHT,
        "SLOW_DOWN": codes.RATE_LIMITED,
    }
    result_fields: ClassVar[tuple[str, ...]] = ("id", "name", "note")


class ProbeWriteNoLookup(ProbeWrite):
    tool: ClassVar[str] = "probe_write_no_lookup"
    has_lookup: ClassVar[bool] = False


class ProbeRead(HttpReadAdapter[ProbeInput]):
    tool: ClassVar[str] = "probe_read"
    input_model: ClassVar[type[BaseModel]] = ProbeInput
    path: ClassVar[str] = "/things"
    result_fields: ClassVar[tuple[str, ...]] = ("name", "note")
