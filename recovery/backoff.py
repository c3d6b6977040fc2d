"""Backoff delays: exponential growth, a cap, full jitter drawn only from the rng passed in."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Final

from toolsafe.recovery.policy import Policy

# 2**62 seconds is far beyond any cap; stopping there keeps the float arithmetic finite.
_MAX_EXPONENT: Final = 62


def full_jitter(base: timedelta, cap: timedelta, exponent: int, rng: random.Random) -> timedelta:
    """``uniform(0, min(cap, base * 2**exponent))``: spreads retries of many steps apart."""
    exponent = min(max(exponent, 0), _MAX_EXPONENT)
    ceiling = min(cap.total_seconds(), base.total_seconds() * 2**exponent)
    return timedelta(seconds=rng.uniform(0.0, ceiling))


def retry_delay(policy: Policy, attempts: int, rng: random.Random) -> timedelta:
    """Delay before the next execution of a step that has been claimed ``attempts`` times."""
    return full_jitter(policy.retry.base_delay, policy.retry.max_delay, attempts - 1, rng)


def unavailable_delay(
    policy: Policy, unavailable: int, retry_after: timedelta | None, rng: random.Random
) -> timedelta:
    """Delay before looking again after the ``unavailable``-th unavailable lookup in a row:
    the jittered backoff, or the downstream's ``Retry-After`` when that is longer (plus a
    little jitter, so that steps the same outage hit do not come back in lockstep)."""
    delay = verification_delay(policy, unavailable, rng)
    if retry_after is not None and retry_after > delay:
        spread = min(retry_after * 0.1, policy.verification.max_delay)
        delay = retry_after + timedelta(seconds=rng.uniform(0.0, spread.total_seconds()))
    return delay


def verification_delay(policy: Policy, verification_attempts: int, rng: random.Random) -> timedelta:
    """Delay before the next lookup; ``verification_attempts`` 0 is the short first check."""
    verification = policy.verification
    return full_jitter(verification.base_delay, verification.max_delay, verification_attempts, rng)
