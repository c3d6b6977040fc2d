"""Verification outlasts short outages of the lookup: a time budget per tool counted from
the send of the write, jittered backoff, the lookup's Retry-After honoured (bounded by
the budget), escalation only once the budget is spent (pure, no I/O)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.recovery.decide_factories import NOW, POLICY, run, step
from toolsafe.adapters.protocol import LookupUnavailable
from toolsafe.recovery import reasons as R
from toolsafe.recovery.backoff import unavailable_delay, verification_delay
from toolsafe.recovery.decide import decide
from toolsafe.recovery.outcomes import LookedUp, StepSnapshot
from toolsafe.recovery.policy import Policy, VerificationPolicy
from toolsafe.recovery.states import StepState
from toolsafe.settings import Settings, SettingsError

S = StepState
BUDGET = POLICY.verification.budget
LIMIT = POLICY.verification.max_unavailable


def unavailable(retry_after: float | None = None) -> LookedUp:
    asked = None if retry_after is None else timedelta(seconds=retry_after)
    return LookedUp(LookupUnavailable(checked_at=NOW, code="LOOKUP_HTTP_503", retry_after=asked))


def verifying(sent_ago: timedelta, unavailable_so_far: int) -> StepSnapshot:
    return step(
        S.VERIFYING, commit_state="unknown", lookups_unavailable=unavailable_so_far,
        last_sent_at=NOW - sent_ago,
    )  # fmt: skip


def test_the_default_budget_is_minutes_not_seconds() -> None:
    assert timedelta(minutes=10) == BUDGET
    assert Settings.from_env({}).policies.for_tool("create_invoice").verification.budget == BUDGET


def test_many_unavailable_lookups_inside_the_budget_look_again() -> None:
    """The old rule escalated after 5 unavailable lookups (~2.5 s); now a minute of
    outage with 50 failed lookups is still inside the budget."""
    snapshot = verifying(timedelta(minutes=1), 50)
    decision = run(snapshot, unavailable(), seed=3)
    assert decision.state is S.VERIFYING
    assert decision.lookups_unavailable == 51
    assert decision.due_at is not None and decision.due_at > NOW


def test_the_budget_spent_escalates() -> None:
    decision = run(verifying(BUDGET, LIMIT - 1), unavailable())
    assert decision.state is S.ESCALATED and decision.reason == R.LOOKUP_UNAVAILABLE


def test_a_spent_budget_still_gives_a_redriven_step_its_fresh_lookups() -> None:
    """An operator re-drives an old step: the budget (from the old send) is long spent,
    yet it escalates only after max_unavailable lookups in a row."""
    old = timedelta(days=2)
    decision = run(verifying(old, 0), unavailable())
    assert decision.state is S.VERIFYING and decision.lookups_unavailable == 1
    assert run(verifying(old, LIMIT - 1), unavailable()).state is S.ESCALATED


def test_without_a_send_time_the_count_alone_decides() -> None:
    snapshot = step(S.VERIFYING, commit_state="unknown", last_sent_at=None)
    assert run(snapshot, unavailable()).state is S.VERIFYING
    spent = replace(snapshot, lookups_unavailable=LIMIT - 1)
    assert run(spent, unavailable()).state is S.ESCALATED


def test_backoff_is_jittered_and_grows() -> None:
    delays = {
        run(verifying(timedelta(seconds=10), 3), unavailable(), seed=seed).due_at
        for seed in range(20)
    }
    assert len(delays) > 10  # jitter: steps hit by one outage do not come back together
    snapshot = verifying(timedelta(seconds=10), 3)
    decision = run(snapshot, unavailable(), seed=9)
    assert decision.due_at == NOW + verification_delay(POLICY, 4, random.Random(9))


def test_retry_after_is_honoured_with_a_little_jitter() -> None:
    decision = run(verifying(timedelta(seconds=10), 1), unavailable(retry_after=20), seed=1)
    assert decision.due_at is not None
    wait = decision.due_at - NOW
    assert timedelta(seconds=20) <= wait <= timedelta(seconds=22)


def test_retry_after_shorter_than_the_backoff_does_not_hurry_it() -> None:
    rng_delay = verification_delay(POLICY, 6, random.Random(2))
    assert unavailable_delay(POLICY, 6, timedelta(0), random.Random(2)) == rng_delay


def test_retry_after_beyond_the_budget_is_bounded_by_it() -> None:
    sent_ago = BUDGET - timedelta(seconds=30)
    decision = run(verifying(sent_ago, 1), unavailable(retry_after=3600))
    assert decision.state is S.VERIFYING
    # The last look falls on the budget's end, not an hour later ...
    assert decision.due_at == NOW + timedelta(seconds=30)
    # ... and if the lookup is still down then, the step escalates.
    at_deadline = verifying(BUDGET, LIMIT - 1)
    assert run(at_deadline, unavailable(retry_after=3600)).state is S.ESCALATED


@given(
    sent_ago=st.floats(0, 2 * BUDGET.total_seconds()),
    failed=st.integers(0, 100),
    retry_after=st.one_of(st.none(), st.floats(0, 7200)),
    seed=st.integers(0, 2**32),
)
def test_escalation_exactly_when_the_budget_is_spent(
    sent_ago: float, failed: int, retry_after: float | None, seed: int
) -> None:
    snapshot = verifying(timedelta(seconds=sent_ago), failed)
    policy = Policy(verification=VerificationPolicy(budget=BUDGET, max_unavailable=LIMIT))
    decision = decide(snapshot, unavailable(retry_after), NOW, policy, random.Random(seed))
    spent = timedelta(seconds=sent_ago) >= BUDGET and failed + 1 >= LIMIT
    assert (decision.state is S.ESCALATED) == spent
    if not spent:
        assert decision.due_at is not None and decision.due_at >= NOW
        deadline = NOW - timedelta(seconds=sent_ago) + BUDGET
        if deadline > NOW:
            assert decision.due_at <= deadline  # never looks after the budget's end


def test_the_budget_is_a_setting_with_per_tool_overrides() -> None:
    settings = Settings.from_env(
        {
            "TOOLSAFE_VERIFY_BUDGET": "120",
            "TOOLSAFE_TOOL_POLICIES": '{"send_email": {"verify_budget": 900}}',
        }
    )
    assert settings.policies.for_tool("create_invoice").verification.budget == timedelta(minutes=2)
    assert settings.policies.for_tool("send_email").verification.budget == timedelta(minutes=15)
    with pytest.raises(SettingsError, match="TOOLSAFE_VERIFY_BUDGET"):
        Settings.from_env({"TOOLSAFE_VERIFY_BUDGET": "0"})
    with pytest.raises(ValueError, match="budget"):
        VerificationPolicy(budget=timedelta(0))
