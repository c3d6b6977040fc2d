"""The example tools ``create_invoice`` and ``send_email`` and their downstream service;
``TOOLSAFE_ADAPTERS=toolsafe.adapters.examples`` loads them.

Their settings (``ExampleSettings``) come from ``TOOLSAFE_EXAMPLE_DOWNSTREAM_URL``,
``TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW`` and ``TOOLSAFE_EXAMPLE_TIMEOUT``, read by
toolsafe's settings at start and handed to ``register``.
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
    http, window = http_settings(settings if settings is not None else ExampleSettings())
    registry.register(CreateInvoice(http, consistency_window=window))
    registry.register(SendEmail(http, consistency_window=window))


__all__ = [
    "ADAPTER_SETTINGS",
    "CreateInvoice",
    "ExampleSettings",
    "SendEmail",
    "http_settings",
    "register",
]
