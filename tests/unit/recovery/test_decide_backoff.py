"""Backoff with full jitter, and the policy values the decision function reads."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from toolsafe.recovery.backoff import full_jitter, retry_delay, verification_delay
from toolsafe.recovery.policy import Policy, RetryPolicy, VerificationPolicy
from toolsafe.settings import PolicySettings, Settings

POLICY = Policy(
    retry=RetryPolicy(base_delay=timedelta(seconds=2), max_delay=timedelta(seconds=60)),
    verification=VerificationPolicy(
        base_delay=timedelta(milliseconds=500), max_delay=timedelta(seconds=8)
    ),
)


@pytest.mark.parametrize(
    ("attempts", "ceiling"),
    [(1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0), (6, 60.0), (40, 60.0), (10_000, 60.0)],
)
def test_retry_delay_is_uniform_up_to_the_capped_exponential(attempts: int, ceiling: float) -> None:
    rng = random.Random(attempts)
    delays = [retry_delay(POLICY, attempts, rng).total_seconds() for _ in range(400)]
    assert all(0.0 <= delay <= ceiling for delay in delays)
    # Full jitter spreads over the whole range, not just near the ceiling.
    assert min(delays) < ceiling * 0.1
    assert max(delays) > ceiling * 0.9


def test_retry_delay_draws_exactly_once_from_the_rng() -> None:
    expected = random.Random(99).uniform(0.0, 8.0)
    assert retry_delay(POLICY, 3, random.Random(99)) == timedelta(seconds=expected)


def test_retry_delay_is_deterministic_for_a_seed() -> None:
    first = [retry_delay(POLICY, n, random.Random(5)) for n in range(1, 8)]
    again = [retry_delay(POLICY, n, random.Random(5)) for n in range(1, 8)]
    assert first == again


@pytest.mark.parametrize("attempts", [0, -3])
def test_retry_delay_before_any_attempt_uses_the_base(attempts: int) -> None:
    rng = random.Random(1)
    assert all(retry_delay(POLICY, attempts, rng) <= timedelta(seconds=2) for _ in range(50))


@pytest.mark.parametrize(("tries", "ceiling"), [(0, 0.5), (1, 1.0), (3, 4.0), (4, 8.0), (9, 8.0)])
def test_verification_delay_starts_short_and_is_capped(tries: int, ceiling: float) -> None:
    rng = random.Random(tries)
    delays = [verification_delay(POLICY, tries, rng).total_seconds() for _ in range(200)]
    assert all(0.0 <= delay <= ceiling for delay in delays)
    assert max(delays) > ceiling * 0.8


def test_zero_delays_give_zero() -> None:
    assert full_jitter(timedelta(0), timedelta(0), 5, random.Random(1)) == timedelta(0)


def test_policy_values_are_checked() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=timedelta(seconds=10), max_delay=timedelta(seconds=1))
    with pytest.raises(ValueError, match="max_unavailable"):
        VerificationPolicy(max_unavailable=0)
    with pytest.raises(ValueError, match="base_delay"):
        VerificationPolicy(base_delay=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="loop_guard"):
        Policy(loop_guard=0)


def test_policies_per_tool_fall_back_to_the_default() -> None:
    # The per-tool policies live in the settings, the one home of policy defaults.
    strict = PolicySettings(max_attempts=1)
    settings = Settings().replace(policies={"per_tool": {"send_email": strict}})
    assert settings.policies.for_tool("send_email") == strict.policy()
    assert settings.policies.for_tool("send_email").retry.max_attempts == 1
    assert settings.policies.for_tool("create_invoice") == settings.policies.default.policy()
