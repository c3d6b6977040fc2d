"""The example tools ``create_invoice`` and ``send_email`` and their downstream service;
``TOOLSAFE_ADAPTERS=toolsafe.adapters.examples`` loads them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Final

from toolsafe.adapters.examples.email import SendEmail
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.registry import Registry

URL_ENV: Final = "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL"
WINDOW_ENV: Final = "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW"
# How long the example adapters wait for the downstream to answer (read and write); the
# demo shortens it so its timeout scenario takes seconds.
TIMEOUT_ENV: Final = "TOOLSAFE_EXAMPLE_TIMEOUT"
DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_URL: Final = "http://127.0.0.1:8900"
DEFAULT_WINDOW: Final = 2.0


def settings_from_env(env: Mapping[str, str] | None = None) -> tuple[HttpSettings, timedelta]:
    """The downstream's settings from the environment; a bad value names its variable."""
    source = os.environ if env is None else env
    url = source.get(URL_ENV, DEFAULT_URL).strip() or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{URL_ENV} must be an http:// or https:// URL, got {url!r}")
    raw_window = source.get(WINDOW_ENV, str(DEFAULT_WINDOW))
    try:
        window = float(raw_window)
    except ValueError:
        raise ValueError(f"{WINDOW_ENV} must be a number of seconds, got {raw_window!r}") from None
    if not 0 <= window <= 3600:
        raise ValueError(f"{WINDOW_ENV} must be between 0 and 3600 seconds, got {window}")
    raw_timeout = source.get(TIMEOUT_ENV, str(DEFAULT_TIMEOUT))
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise ValueError(
            f"{TIMEOUT_ENV} must be a number of seconds, got {raw_timeout!r}"
        ) from None
    if not 0 < timeout <= 600:
        raise ValueError(f"{TIMEOUT_ENV} must be above 0 and at most 600 seconds, got {timeout}")
    http = HttpSettings(base_url=url, read_timeout=timeout, write_timeout=timeout)
    return http, timedelta(seconds=window)


def register(registry: Registry) -> None:
    settings, window = settings_from_env()
    registry.register(CreateInvoice(settings, consistency_window=window))
    registry.register(SendEmail(settings, consistency_window=window))


__all__ = ["CreateInvoice", "SendEmail", "register", "settings_from_env"]
