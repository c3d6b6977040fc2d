"""The catalogue of lookup codes: the ``code`` of a ``LookupUnavailable``, why a lookup
could not say found or not found (``toolsafe.adapters.codes`` holds the envelope's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

LOOKUP_UNSPECIFIED: Final = "LOOKUP_UNSPECIFIED"
LOOKUP_NOT_PROVIDED: Final = "LOOKUP_NOT_PROVIDED"
LOOKUP_EXCEPTION: Final = "LOOKUP_EXCEPTION"
LOOKUP_CONTRACT_VIOLATION: Final = "LOOKUP_CONTRACT_VIOLATION"
LOOKUP_UNKNOWN_TOOL: Final = "LOOKUP_UNKNOWN_TOOL"
LOOKUP_UNREACHABLE: Final = "LOOKUP_UNREACHABLE"
LOOKUP_UNEXPECTED_404: Final = "LOOKUP_UNEXPECTED_404"
LOOKUP_UNREADABLE: Final = "LOOKUP_UNREADABLE"
LOOKUP_FILTER_IGNORED: Final = "LOOKUP_FILTER_IGNORED"
LOOKUP_TIMEOUT: Final = "LOOKUP_TIMEOUT"
LOOKUP_HTTP_PREFIX: Final = "LOOKUP_HTTP_"
LOOKUP_HTTP: Final = LOOKUP_HTTP_PREFIX + "<status>"

LOOKUP_CODES: Final[Mapping[str, str]] = {
    LOOKUP_UNSPECIFIED: "the adapter's lookup could not answer and named no cause",
    LOOKUP_NOT_PROVIDED: "the adapter has no lookup to call",
    LOOKUP_EXCEPTION: "the adapter's lookup raised",
    LOOKUP_CONTRACT_VIOLATION: "the lookup returned something that is not a lookup result",
    LOOKUP_UNKNOWN_TOOL: "the worker has no adapter for the step's tool",
    LOOKUP_UNREACHABLE: "the lookup request could not be sent or got no answer",
    LOOKUP_UNEXPECTED_404: "a 404 whose code is not one of the adapter's not-found codes",
    LOOKUP_UNREADABLE: "a 2xx to the lookup without a record or evidence",
    LOOKUP_FILTER_IGNORED: "a list lookup whose records all carry another operation_ref",
    LOOKUP_TIMEOUT: "a decorated tool's lookup function did not return in its time",
    LOOKUP_HTTP: "the lookup answered with another HTTP status, e.g. LOOKUP_HTTP_503",
}
"""The ``code`` of ``LookupUnavailable``: why a lookup could not say found or not found.
An entry ending in ``<…>`` is a family whose codes are built by a function here."""


def lookup_http(status: int) -> str:
    """The lookup code of an HTTP status other than found (2xx) or not found (404)."""
    return f"{LOOKUP_HTTP_PREFIX}{status}"


def is_lookup_code(code: str) -> bool:
    """Whether ``code`` is one of :data:`LOOKUP_CODES` (a family included)."""
    if code in LOOKUP_CODES:
        return True
    suffix = code.removeprefix(LOOKUP_HTTP_PREFIX)
    return suffix != code and suffix.isdigit()
