"""Policies: plain values the decision function reads (per tool, defaults in settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta


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
    # "Lookup unavailable" this many times in a row escalates.
    max_unavailable: int = 5

    def __post_init__(self) -> None:
        if self.max_unavailable < 1:
            raise ValueError("max_unavailable must be at least 1")
        if self.base_delay < timedelta(0) or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")


@dataclass(frozen=True)
class ToolTraits:
    """What the runtime must know about the tool behind a step."""

    writes: bool
    has_lookup: bool
    consistency_window: timedelta = timedelta(0)
    # How long a call may still be running after its claim (the task's hard time limit):
    # a write not found before then may yet be sent by a paused process, so it is not
    # sent again before then (docs/operations.md, "What stops a paused process").
    longest_call: timedelta = timedelta(0)


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
