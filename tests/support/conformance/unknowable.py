"""The issue's own mistake, which the decorator refuses when the module is imported: a
read timeout after the downstream stored the write, declared "nothing was written"."""

from __future__ import annotations

from typing import Any

import httpx

from toolsafe import tool
from toolsafe.adapters import codes


@tool(errors={httpx.TimeoutException: codes.DEPENDENCY_UNAVAILABLE}, lookup=lambda ref: None)
def timeout_not_committed(customer_id: str, operation_ref: str) -> dict[str, Any]:
    """Charge, calling a timeout retryable."""
    return {"id": "never"}
