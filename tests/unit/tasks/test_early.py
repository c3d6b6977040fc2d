"""An early hint's wait, as pure logic (``tasks/early.py``) and as the claim guard's due
time (``Guard.due_later``): how long a worker may wait, when it waits, and for what."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.tasks.fake_time import FakeTime
from tests.support.tasks.memory_support import (
    INPUT,
    TOOL,
    RecordingHints,
    ScriptedAdapter,
    memory_runtime,
    success,
    unknown,
)
from toolsafe.adapters.protocol import LookupFound
from toolsafe.recovery.guards import EXECUTION, VERIFICATION
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.reasons import NOOP_CLAIMED, NOOP_NOT_DUE, NOOP_REASONS
from toolsafe.recovery.records import Refused
from toolsafe.recovery.rows import claim_refused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.settings import CallSettings, Settings
from toolsafe.tasks import early, pipeline
from toolsafe.tasks.clock import Clock, early_bound, eta_margin
from toolsafe.tasks.runtime import Runtime

S = StepState
T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)
REF = "run_81/step_4"
LEASE = timedelta(seconds=30)
# The default TOOLSAFE_EARLY_WAIT.
ALLOWANCE = timedelta(seconds=CallSettings().early_wait)


def test_the_bound_is_twice_the_uncertainty_plus_the_allowance() -> None:
    assert ALLOWANCE == 5 * MS  # a few milliseconds: the wait holds a pool slot
    assert early_bound(timedelta(0), ALLOWANCE) == ALLOWANCE
    assert early_bound(0.4 * MS, ALLOWANCE) == 0.8 * MS + ALLOWANCE
    # An uncertainty is never negative; were one handed in, it would not shorten the bound.
    assert early_bound(-MS, ALLOWANCE) == ALLOWANCE
    # The allowance is the setting's, whatever it is.
    assert early_bound(0.4 * MS, timedelta(seconds=2)) == 0.8 * MS + timedelta(seconds=2)
    assert early_bound(0.4 * MS, timedelta(0)) == 0.8 * MS


def test_a_publisher_adds_only_what_its_uncertainty_exceeds_half_the_allowance() -> None:
    quiet = eta_margin(timedelta(0), ALLOWANCE)
    assert quiet == eta_margin(2 * MS, ALLOWANCE) == timedelta(0)  # quiet: none
    assert eta_margin(ALLOWANCE / 2, ALLOWANCE) == timedelta(0)
    assert eta_margin(30 * MS, ALLOWANCE) == 30 * MS - ALLOWANCE / 2  # a loaded measurement
    # A larger allowance leaves a slower measurement without a margin.
    assert eta_margin(30 * MS, timedelta(seconds=1)) == timedelta(0)


@given(
    publisher=st.integers(0, 200_000).map(lambda us: timedelta(microseconds=us)),
    consumer=st.integers(0, 200_000).map(lambda us: timedelta(microseconds=us)),
)
def test_a_hint_is_never_early_by_more_than_its_consumer_waits_out(
    publisher: timedelta, consumer: timedelta
) -> None:
    """However unlike the two measurements: a hint sent ``eta_margin`` after the
    publisher's estimate, which is off by up to its uncertainty, and judged by a consumer
    off by up to its own, is early by at most half the allowance plus the consumer's
    error: inside the consumer's bound, with half the allowance left for drift."""
    earliest = publisher - eta_margin(publisher, ALLOWANCE) + consumer
    assert earliest <= consumer + ALLOWANCE / 2
    bound = early_bound(consumer, ALLOWANCE)
    assert earliest + ALLOWANCE / 2 <= bound


def test_an_early_hint_within_the_bound_waits_for_its_due_time() -> None:
    uncertainty = 0.5 * MS  # bound: 6 ms
    for ahead in (MS / 1000, MS, 6 * MS):
        refused = Refused(NOOP_NOT_DUE, T0 + ahead)
        assert early.wait_until(refused, T0, uncertainty, ALLOWANCE) == T0 + ahead


def test_a_hint_early_by_more_than_the_bound_is_refused_as_before() -> None:
    uncertainty = 0.5 * MS
    beyond = early_bound(uncertainty, ALLOWANCE) + timedelta(microseconds=1)
    refused = Refused(NOOP_NOT_DUE, T0 + beyond)
    assert early.wait_until(refused, T0, uncertainty, ALLOWANCE) is None
    later = Refused(NOOP_NOT_DUE, T0 + timedelta(seconds=3))
    assert early.wait_until(later, T0, MS, ALLOWANCE) is None
    # ... unless the setting allows that much: a hint 3 s early is waited out too.
    assert early.wait_until(later, T0, MS, timedelta(seconds=3)) == later.due_at


@pytest.mark.parametrize("reason", sorted(set(NOOP_REASONS) - {NOOP_NOT_DUE}))
def test_only_a_not_due_refusal_waits(reason: str) -> None:
    # Whatever due time came with it: claimed, terminal, missing... never wait.
    assert early.wait_until(Refused(reason, T0 + MS), T0, MS, ALLOWANCE) is None


def test_a_not_due_refusal_without_a_due_time_does_not_wait() -> None:
    # No due_at (a row without one; a verification hint for a step not verifying).
    assert early.wait_until(Refused(NOOP_NOT_DUE), T0, MS, ALLOWANCE) is None


@given(
    ahead=st.integers(-10_000, 20_000).map(lambda us: timedelta(microseconds=us)),
    elapsed=st.integers(-5_000, 10_000).map(lambda us: timedelta(microseconds=us)),
    uncertainty=st.integers(0, 5_000).map(lambda us: timedelta(microseconds=us)),
)
def test_the_sleep_is_never_negative_nor_longer_than_the_bound(
    ahead: timedelta, elapsed: timedelta, uncertainty: timedelta
) -> None:
    """From the refusal to the sleep, time passed (``elapsed``; negative: this process's
    clock was measured again and moved back): the sleep reaches the due time when the
    bound allows, and never exceeds it."""
    due_at = T0 + ahead
    left = early.seconds_left(due_at, T0 + elapsed, uncertainty, ALLOWANCE)
    bound = early_bound(uncertainty, ALLOWANCE)
    assert 0.0 <= left <= bound.total_seconds()
    if timedelta(0) <= due_at - (T0 + elapsed) <= bound:
        assert left == pytest.approx((due_at - (T0 + elapsed)).total_seconds())


# ------------------------------------------------------------------ the guard's due time


@dataclass(frozen=True)
class Row:
    """The columns a guard reads."""

    state: str
    commit_state: str | None = None
    attempts: int = 0
    max_attempts: int = 3
    due_at: datetime | None = None
    lease_expires_at: datetime | None = None


def test_a_step_waiting_only_for_its_due_time_reports_it() -> None:
    due = T0 + 2 * MS
    for state in (S.PENDING, S.WAITING_RETRY):
        assert claim_refused("execute", Row(state.value, due_at=due), T0) == Refused(
            NOOP_NOT_DUE, due
        )
    verifying = Row(S.VERIFYING.value, "unknown", due_at=due)
    assert claim_refused("verify", verifying, T0) == Refused(NOOP_NOT_DUE, due)
    # A verification lease over before now is no obstacle.
    lapsed = Row(S.VERIFYING.value, "unknown", due_at=due, lease_expires_at=T0)
    assert claim_refused("verify", lapsed, T0) == Refused(NOOP_NOT_DUE, due)


def test_no_due_time_when_more_than_time_stands_in_the_way() -> None:
    due = T0 + 2 * MS
    # Not due, but also nothing a claim at due_at would pass:
    spent = Row(S.WAITING_RETRY.value, attempts=3, max_attempts=3, due_at=due)
    assert claim_refused("execute", spent, T0) == Refused("attempts_spent")
    # A verification hint for a step waiting to retry: not_due, but not for time.
    assert claim_refused("verify", Row(S.WAITING_RETRY.value, due_at=due), T0) == Refused(
        NOOP_NOT_DUE
    )
    # A live verification lease (someone is looking it up), however soon it ends.
    for ends in (T0 + MS, due + MS):
        held = Row(S.VERIFYING.value, "unknown", due_at=due, lease_expires_at=ends)
        assert claim_refused("verify", held, T0) == Refused(NOOP_CLAIMED)
        assert VERIFICATION.due_later(held, T0) is None
    # No due time at all, or one already passed (a claim that lost a race: "claimed").
    assert claim_refused("execute", Row(S.PENDING.value), T0) == Refused(NOOP_NOT_DUE)
    assert claim_refused("execute", Row(S.PENDING.value, due_at=T0), T0) == Refused(NOOP_CLAIMED)
    assert claim_refused("execute", None, T0) == Refused("missing")
    assert EXECUTION.due_later(None, T0) is None


# ------------------------------------------------------------------ the worker's claim
# The pipeline over the memory store, on a fake clock whose measurement took 2 ms there
# and back (uncertainty 1 ms: the bound is 7 ms) and whose sleeps take no time.


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime(trip=0.002)


@pytest.fixture
def adapter() -> ScriptedAdapter:
    return ScriptedAdapter()


@pytest.fixture
def runtime(fake: FakeTime, adapter: ScriptedAdapter) -> Runtime:
    runtime, _ = memory_runtime(adapter)
    runtime.clock = fake.clock()
    return runtime


@pytest.fixture
def store(runtime: Runtime) -> MemoryStore:
    assert isinstance(runtime.store, MemoryStore)
    return runtime.store


def _due_in(runtime: Runtime, ahead: timedelta) -> datetime:
    """A pending step due ``ahead`` of the database's time now (as a hint early by that
    finds it); its due time."""
    due = runtime.now() + ahead
    runtime.store.submit(TOOL, INPUT, operation_ref=REF, policy=runtime.policy_for(TOOL), now=due)
    return due


def test_the_fake_clock_gives_the_bound_these_tests_assume(runtime: Runtime) -> None:
    runtime.now()
    assert early_bound(runtime.clock.uncertainty, ALLOWANCE) == 7 * MS


def test_an_early_hint_within_the_bound_waits_then_runs_the_step_once(
    runtime: Runtime, store: MemoryStore, fake: FakeTime, adapter: ScriptedAdapter
) -> None:
    due = _due_in(runtime, 5 * MS)
    adapter.answers.append(success)
    assert pipeline.execute(runtime, RecordingHints(), REF) == "succeed"
    assert fake.slept == [pytest.approx(0.005)]
    assert len(adapter.calls) == 1 and store.get(REF).state is S.SUCCEEDED
    events = store.events(REF)
    assert [event.kind for event in events] == ["submitted", "noop", "claimed", "executed"]
    assert events[1].detail == {"claim": "execute", "reason": NOOP_NOT_DUE}  # the early one
    # Claimed at its due time on the database's clock, not before (R6).
    assert events[2].at >= due and store.get(REF).last_sent_at == events[2].at


def test_a_hint_early_by_more_than_the_bound_is_refused_and_sleeps_not(
    runtime: Runtime, store: MemoryStore, fake: FakeTime, adapter: ScriptedAdapter
) -> None:
    _due_in(runtime, 7 * MS + timedelta(microseconds=10))
    assert pipeline.execute(runtime, RecordingHints(), REF) == "noop"
    assert fake.slept == [] and adapter.calls == []
    assert [event.kind for event in store.events(REF)] == ["submitted", "noop"]
    assert store.get(REF).state is S.PENDING  # the sweeper's, once it is due


def test_the_second_claim_gets_its_own_answer(
    runtime: Runtime, store: MemoryStore, fake: FakeTime, adapter: ScriptedAdapter
) -> None:
    """The step moved while the worker waited (another worker claimed it): nothing runs
    here, and the refusal is an answer like any other."""

    def sleep_while_another_claims(seconds: float) -> None:
        fake.sleep(seconds)
        assert store.claim_execution(REF, "another-worker", LEASE, due) is not None

    runtime.clock = Clock(
        fake.database, local=fake.local, monotonic=fake.monotonic, sleep=sleep_while_another_claims
    )
    due = _due_in(runtime, 3 * MS)
    assert pipeline.execute(runtime, RecordingHints(), REF) == "noop"
    assert adapter.calls == []
    noops = [event.detail["reason"] for event in store.events(REF) if event.kind == "noop"]
    assert noops == [NOOP_NOT_DUE, NOOP_CLAIMED]
    assert store.get(REF).lease_owner == "another-worker"


def test_the_worker_waits_as_long_as_its_settings_allow(fake: FakeTime) -> None:
    """``TOOLSAFE_EARLY_WAIT`` is the allowance the worker uses: with 2 s of it, a hint
    1.5 s early is waited out (with the default 5 ms, it is refused: the test above)."""
    adapter = ScriptedAdapter()
    settings = Settings().replace(calls={"early_wait": 2.0})
    runtime, _ = memory_runtime(adapter, settings)
    runtime.clock = fake.clock()
    due = _due_in(runtime, timedelta(seconds=1.5))
    adapter.answers.append(success)
    assert pipeline.execute(runtime, RecordingHints(), REF) == "succeed"
    assert fake.slept == [pytest.approx(1.5)] and len(adapter.calls) == 1
    [claimed] = [event for event in runtime.store.events(REF) if event.kind == "claimed"]
    assert claimed.at >= due


def test_an_early_verification_hint_waits_too(
    runtime: Runtime, store: MemoryStore, fake: FakeTime, adapter: ScriptedAdapter
) -> None:
    runtime.store.submit(
        TOOL, INPUT, operation_ref=REF, policy=runtime.policy_for(TOOL), now=runtime.now()
    )
    claim = runtime.store.claim_execution(REF, "old-worker", LEASE, runtime.now())
    assert claim is not None
    recorded = runtime.store.record(
        claim,
        Executed(unknown(REF)),
        traits=runtime.traits_for(TOOL),
        policy=runtime.policy_for(TOOL),
        now=runtime.now(),
        rng=runtime.rng,
    )
    assert recorded is not None and recorded.step.due_at is not None
    fake.advance((recorded.step.due_at - runtime.now() - 4 * MS).total_seconds())
    adapter.lookups.append(lambda: LookupFound(checked_at=fake.wall, result={}, evidence_ref="ev"))
    assert pipeline.verify(runtime, RecordingHints(), REF) == "succeed"
    assert fake.slept == [pytest.approx(0.004)]
    assert store.get(REF).state is S.SUCCEEDED and len(adapter.looked_up) == 1
