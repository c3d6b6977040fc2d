"""Policies: plain values the decision function reads, with their defaults and their
checks (the one home of both; ``toolsafe.settings`` reads the knobs from the environment)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final

# The flat names of the policy's values (``TOOLSAFE_<KNOB>`` and the keys of
# ``TOOLSAFE_TOOL_POLICIES``), in the order the documentation lists them.
KNOBS: Final = (
    "max_attempts",
    "retry_base_delay",
    "retry_max_delay",
    "longest_wait",
    "verify_base_delay",
    "verify_max_delay",
    "max_lookups_unavailable",
    "verify_budget",
    "loop_guard",
)


class PolicyError(ValueError):
    """A policy value out of range; ``knob`` is its flat name (one of ``KNOBS``)."""

    def __init__(self, knob: str, where: str, problem: str) -> None:
        super().__init__(knob, where, problem)
        self.knob = knob
        self.where = where
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.where} {self.problem}"


def _check(ok: bool, knob: str, where: str, problem: str) -> None:
    if not ok:
        raise PolicyError(knob, where, problem)


@dataclass(frozen=True)
class RetryPolicy:
    """Executions of one step: at most ``max_attempts``, exponential backoff, full jitter."""

    max_attempts: int = 5
    base_delay: timedelta = timedelta(seconds=1)
    max_delay: timedelta = timedelta(minutes=5)
    # A not_before further away than this escalates instead of waiting.
    longest_wait: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        _check(self.max_attempts >= 1, "max_attempts", "max_attempts", "must be at least 1")
        _check(
            self.base_delay >= timedelta(0),
            "retry_base_delay",
            "retry base_delay",
            "must not be negative",
        )
        _check(
            self.max_delay >= self.base_delay,
            "retry_max_delay",
            "retry max_delay",
            "must be at least the retry base_delay",
        )
        _check(
            self.longest_wait > timedelta(0),
            "longest_wait",
            "longest_wait",
            "must be greater than 0",
        )


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
        _check(
            self.max_unavailable >= 1,
            "max_lookups_unavailable",
            "verification max_unavailable",
            "must be at least 1",
        )
        _check(
            self.base_delay >= timedelta(0),
            "verify_base_delay",
            "verification base_delay",
            "must not be negative",
        )
        _check(
            self.max_delay >= self.base_delay,
            "verify_max_delay",
            "verification max_delay",
            "must be at least the verification base_delay",
        )
        _check(
            self.budget > timedelta(0),
            "verify_budget",
            "verification budget",
            "must be greater than 0",
        )


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
    # The downstream enforces the operation_ref as its idempotency key (the adapter's
    # ``deduplicates_by_key``): a late request of an earlier attempt meets a retry's key
    # and makes no second effect, so a retry need not wait out ``longest_call``.
    deduplicates_by_key: bool = False


@dataclass(frozen=True)
class Policy:
    """Everything ``decide`` reads besides the step and the outcome."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    verification: VerificationPolicy = field(default_factory=VerificationPolicy)
    # The same error fingerprint this many times in a row escalates.
    loop_guard: int = 3

    def __post_init__(self) -> None:
        _check(self.loop_guard >= 1, "loop_guard", "loop_guard", "must be at least 1")


# Knobs that count (whole numbers); the others are seconds.
WHOLE_KNOBS: Final = frozenset({"max_attempts", "max_lookups_unavailable", "loop_guard"})


def knobs_of(policy: Policy) -> dict[str, float]:
    """The policy as flat values in seconds and counts, keyed by ``KNOBS``."""
    retry, verification = policy.retry, policy.verification
    return {
        "max_attempts": retry.max_attempts,
        "retry_base_delay": retry.base_delay.total_seconds(),
        "retry_max_delay": retry.max_delay.total_seconds(),
        "longest_wait": retry.longest_wait.total_seconds(),
        "verify_base_delay": verification.base_delay.total_seconds(),
        "verify_max_delay": verification.max_delay.total_seconds(),
        "max_lookups_unavailable": verification.max_unavailable,
        "verify_budget": verification.budget.total_seconds(),
        "loop_guard": policy.loop_guard,
    }


def policy_from_knobs(knobs: Mapping[str, float]) -> Policy:
    """A policy from flat values (``KNOBS``; a missing one keeps its default); raises
    :class:`PolicyError` naming the knob of a value out of range."""
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown policy knobs {', '.join(unknown)}; known: {', '.join(KNOBS)}")
    values = {**knobs_of(Policy()), **knobs}
    return Policy(
        retry=RetryPolicy(
            max_attempts=int(values["max_attempts"]),
            base_delay=_seconds(values, "retry_base_delay"),
            max_delay=_seconds(values, "retry_max_delay"),
            longest_wait=_seconds(values, "longest_wait"),
        ),
        verification=VerificationPolicy(
            base_delay=_seconds(values, "verify_base_delay"),
            max_delay=_seconds(values, "verify_max_delay"),
            max_unavailable=int(values["max_lookups_unavailable"]),
            budget=_seconds(values, "verify_budget"),
        ),
        loop_guard=int(values["loop_guard"]),
    )


def _seconds(values: Mapping[str, float], knob: str) -> timedelta:
    try:
        return timedelta(seconds=values[knob])
    except OverflowError:
        raise PolicyError(knob, knob, "is too large") from None
