"""The store's error catalogue: what any backend raises about a step
(``StepNotFound``, ``OperationRefConflict``, ``InvalidOperationRef``) and what
:func:`~toolsafe.recovery.store.backend.open_store` raises about a backend (a URL no
backend serves: ``UnknownStore``; a feature the backend lacks: ``FeatureMissing``)."""

from __future__ import annotations

from collections.abc import Sequence

from toolsafe.adapters.envelope import MAX_OPERATION_REF
from toolsafe.adapters.errors import ToolsafeError, shown

__all__ = [
    "FEATURES",
    "FeatureMissing",
    "InvalidOperationRef",
    "OperationRefConflict",
    "StepNotFound",
    "UnknownStore",
]


def _kept(value: str) -> str:
    # An exception keeps (and pickles, and reprs) at most this much of a caller's value.
    return value[: MAX_OPERATION_REF + 1] if isinstance(value, str) else value


def _quoted(operation_ref: str, length: int) -> str:
    if length > len(operation_ref):
        return f"{operation_ref[:40]!r}… ({length} characters)"
    return shown(operation_ref)


class StepNotFound(ToolsafeError, LookupError):
    def __init__(self, operation_ref: str, length: int | None = None) -> None:
        length = len(operation_ref) if length is None else length
        operation_ref = _kept(operation_ref)
        super().__init__(operation_ref, length)
        self.operation_ref = operation_ref
        self.length = length

    def __str__(self) -> str:
        return f"no step with operation_ref {_quoted(self.operation_ref, self.length)}"


class OperationRefConflict(ToolsafeError, ValueError):
    """The operation_ref exists with another tool or another input (R2)."""

    def __init__(self, operation_ref: str, what: str) -> None:
        super().__init__(operation_ref, what)
        self.operation_ref = operation_ref
        self.what = what

    def __str__(self) -> str:
        return (
            f"operation_ref {shown(self.operation_ref)} already exists with a different "
            f"{self.what}; "
            "use a new operation_ref for a different call"
        )


class InvalidOperationRef(ToolsafeError, ValueError):
    """An operation_ref that cannot travel in an envelope (see ``toolsafe.adapters.envelope``)."""

    def __init__(self, operation_ref: str, length: int | None = None) -> None:
        length = len(operation_ref) if length is None else length
        operation_ref = _kept(operation_ref)
        super().__init__(operation_ref, length)
        self.operation_ref = operation_ref
        self.length = length

    def __str__(self) -> str:
        quoted = _quoted(self.operation_ref, self.length)
        return (
            f"operation_ref {quoted} is not valid: 1 to {MAX_OPERATION_REF} "
            "letters, digits and _ . : / -, starting with a letter or digit"
        )


FEATURES: dict[str, str] = {
    "keys": "the gateway's API keys",
    "overview": "the status page's counts and pages",
    "tally": "the metrics exporter's reading of the event log",
    "retention": "purge and re-sealing of stored inputs",
    "workers": "the workers' heartbeats (the gateway's no_worker answer, toolsafe workers)",
    "clock": "the database's time, which leases and due times are judged by",
    "loop_reads": "a step's view read on an event loop, without a thread (the gateway)",
}
"""A backend's optional features, each with what needs it."""
_NEEDED: dict[str, str] = {**FEATURES, "migrations": "a database schema for toolsafe migrate"}


class FeatureMissing(ToolsafeError, LookupError):
    """The store ``backend`` has no ``feature`` (one of :data:`FEATURES`, or
    ``migrations``: a store URL that names no database)."""

    def __init__(self, backend: str, feature: str) -> None:
        super().__init__(backend, feature)
        self.backend = backend
        self.feature = feature

    def __str__(self) -> str:
        needed = _NEEDED.get(self.feature, self.feature)
        return (
            f"the {self.backend} store has no {self.feature} ({needed}); "
            "use a store that has it, such as postgresql:// or sqlite:///path"
        )


class UnknownStore(ToolsafeError, ValueError):
    """A store URL whose scheme no backend is registered for (or that is no URL)."""

    def __init__(self, url: str, known: Sequence[str]) -> None:
        scheme = url.partition("://")[0] if "://" in url else ""
        super().__init__(scheme, tuple(known))
        self.scheme = scheme
        self.known = tuple(known)

    def __str__(self) -> str:
        schemes = ", ".join(f"{name}://" for name in self.known)
        if not self.scheme:
            return f"a store URL needs a scheme, one of {schemes}"
        return (
            f"no store backend for {self.scheme}://; the known ones are {schemes} "
            "(a package can add one under the toolsafe.stores entry point group)"
        )
