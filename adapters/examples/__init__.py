"""The example tools ``create_invoice`` and ``send_email`` and their downstream service;
``TOOLSAFE_ADAPTERS=toolsafe.adapters.examples`` loads them.

Their settings (``ExampleSettings``) come from ``TOOLSAFE_EXAMPLE_DOWNSTREAM_URL``,
``TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW``, ``TOOLSAFE_EXAMPLE_TIMEOUT`` and
``TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY``, read by toolsafe's settings at start and handed
to ``register``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.adapters.examples.email import SendEmail
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.registry import AdapterSettings, Registry

DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_URL: Final = "http://127.0.0.1:8900"
DEFAULT_WINDOW: Final = 2.0


class ExampleSettings(BaseModel):
    """Where the example downstream is and how long to wait for it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    downstream_url: str = Field(
        default=DEFAULT_URL,
        pattern=r"^https?://\S+$",
        description="an http:// or https:// URL",
    )
    consistency_window: float = Field(
        default=DEFAULT_WINDOW,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="a number of seconds between 0 and 3600",
    )
    # How long the adapters wait for the downstream to answer (read and write); the demo
    # shortens it so its timeout scenario takes seconds.
    timeout: float = Field(
        default=DEFAULT_TIMEOUT,
        gt=0,
        le=600,
        allow_inf_nan=False,
        description="a number of seconds above 0 and at most 600",
    )
    # Whether the adapters declare ``deduplicates_by_key``: true only when the example
    # downstream enforces Idempotency-Key, i.e. runs without ``--naive`` (which stores
    # every request, so that a duplicate shows). Off by default: the trait is a promise
    # about the deployed downstream that the adapters cannot check themselves.
    deduplicates_by_key: bool = Field(
        default=False,
        description="true or false (true only for a downstream run without --naive)",
    )


ADAPTER_SETTINGS: Final = AdapterSettings(
    prefix="EXAMPLE", model=ExampleSettings, target="downstream_url"
)


def http_settings(settings: ExampleSettings) -> tuple[HttpSettings, timedelta]:
    """The HTTP client settings and the consistency window the adapters are built with."""
    http = HttpSettings(
        base_url=settings.downstream_url,
        read_timeout=settings.timeout,
        write_timeout=settings.timeout,
    )
    return http, timedelta(seconds=settings.consistency_window)


def register(registry: Registry, settings: ExampleSettings | None = None) -> None:
    given = settings if settings is not None else ExampleSettings()
    http, window = http_settings(given)
    deduplicated = given.deduplicates_by_key
    registry.register(CreateInvoice(http, window, deduplicates_by_key=deduplicated))
    registry.register(SendEmail(http, window, deduplicates_by_key=deduplicated))


__all__ = [
    "ADAPTER_SETTINGS",
    "CreateInvoice",
    "ExampleSettings",
    "SendEmail",
    "http_settings",
    "register",
]
