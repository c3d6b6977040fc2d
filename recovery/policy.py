"""Policies: plain values the decision function reads (per tool, defaults in settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType


@dataclass(frozen=True)
class RetryPolicy:
    """Executions of one step: at most ``max_attempts``, exponential backoff, full jitter."""

    max_attempts: int = 5
    base_delay: timedelta = timedelta(seconds=1)
    max_delay: timedelta = timedelta(minutes=5)
    # A not_before further away than this escalates instead of waiting.
    longest_wait: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < timedelta(0) or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")


@dataclass(frozen=True)
class VerificationPolicy:
    """Lookups of an unknown outcome."""

    # Re-check delays while "not found" inside the consistency window.
    base_delay: timedelta = timedelta(milliseconds=500)
    max_delay: timedelta = timedelta(seconds=30)
    # An unavailable lookup escalates only once this much time has passed since the write
    # was sent (the verification's time budget) ...
    budget: timedelta = timedelta(minutes=10)
    # ... and at least this many lookups in a row were unavailable (an operator's re-drive
    # of an old step gets that many fresh tries). Without a send time, the count alone.
    max_unavailable: int = 5

    def __post_init__(self) -> None:
        if self.max_unavailable < 1:
            raise ValueError("max_unavailable must be at least 1")
        if self.budget <= timedelta(0):
            raise ValueError("budget must be positive")
        if self.base_delay < timedelta(0) or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")


@dataclass(frozen=True)
class ToolTraits:
    """What the runtime must know about the tool behind a step."""

    writes: bool
    has_lookup: bool
    consistency_window: timedelta = timedelta(0)


@dataclass(frozen=True)
class Policy:
    """Everything ``decide`` reads besides the step and the outcome."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    verification: VerificationPolicy = field(default_factory=VerificationPolicy)
    # The same error fingerprint this many times in a row escalates.
    loop_guard: int = 3

    def __post_init__(self) -> None:
        if self.loop_guard < 1:
            raise ValueError("loop_guard must be at least 1")


@dataclass(frozen=True)
class Policies:
    """The policy of each tool: the settings' default unless the tool has its own."""

    default: Policy = field(default_factory=Policy)
    per_tool: Mapping[str, Policy] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # A read-only copy: a frozen value must not change behind its users' backs.
        object.__setattr__(self, "per_tool", MappingProxyType(dict(self.per_tool)))

    def for_tool(self, tool: str) -> Policy:
        return self.per_tool.get(tool, self.default)
