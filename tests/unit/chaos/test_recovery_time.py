"""The chaos report's recovery figures: from a SIGKILL's marker to the first event that
leaves its step final or waiting on the agent, and the recovery wait by scenario."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from toolsafe.chaos.recovery_time import (
    percentile,
    recovered_after,
    summary,
    waits_by_scenario,
)
from toolsafe.recovery.records import CountSources, EventRecord, EventSummary, StepSummary
from toolsafe.recovery.states import StepState

S = StepState
T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


def ev(seconds: float, kind: str, to: StepState | None, number: int = 0) -> EventRecord:
    return EventRecord(
        id=number,
        operation_ref="chaos-1/00001",
        at=T0 + timedelta(seconds=seconds),
        kind=kind,
        from_state=None,
        to_state=to,
        label="-",
        detail={},
    )


def test_a_kill_during_the_call_is_recovered_when_verification_settles_the_step() -> None:
    events = [
        ev(0.0, "submitted", S.PENDING),
        ev(0.1, "claimed", S.IN_FLIGHT),
        ev(0.6, "lease_expired", S.VERIFYING),  # the pool process died at 0.2
        ev(0.9, "looked_up", S.SUCCEEDED),
        ev(1.5, "noop", S.SUCCEEDED),  # a duplicate message, later
    ]
    assert recovered_after(T0 + timedelta(seconds=0.2), events) == pytest.approx(0.7)


def test_a_kill_after_the_outcome_was_recorded_leaves_nothing_to_recover() -> None:
    events = [ev(0.0, "submitted", S.PENDING), ev(0.1, "claimed", S.IN_FLIGHT)]
    events.append(ev(0.3, "executed", S.SUCCEEDED))
    assert recovered_after(T0 + timedelta(seconds=0.4), events) == 0.0
    # Waiting on a person counts as settled too: the rest is the person's time.
    waiting = [ev(0.0, "submitted", S.PENDING), ev(0.3, "executed", S.AWAITING_APPROVAL)]
    approved = [*waiting, ev(9, "approved", S.PENDING)]
    assert recovered_after(T0 + timedelta(seconds=0.5), approved) == 0.0
    assert recovered_after(T0 + timedelta(seconds=0.5), waiting) == 0.0


def test_a_step_never_settled_after_its_kill_has_no_figure() -> None:
    events = [ev(0.0, "submitted", S.PENDING), ev(0.1, "claimed", S.IN_FLIGHT)]
    assert recovered_after(T0 + timedelta(seconds=0.2), events) is None


def test_percentiles_are_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.95) == 95.0
    assert percentile([3.0], 0.95) == 3.0
    assert summary([]) == {"count": 0}
    assert summary([2.0, 1.0, 4.0]) == {"count": 3, "p50": 2.0, "p95": 4.0, "max": 4.0}
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_the_recovery_wait_is_told_apart_by_scenario() -> None:
    def summary_of(ref: str, state: StepState) -> StepSummary:
        return StepSummary(operation_ref=ref, state=state, commit_state=None, reason=None)

    def happened(number: int, ref: str, seconds: float, kind: str, to: StepState) -> EventSummary:
        came_from = {"claimed": S.PENDING, "executed": S.IN_FLIGHT, "looked_up": S.VERIFYING}
        return EventSummary(
            id=number,
            operation_ref=ref,
            at=T0 + timedelta(seconds=seconds),
            kind=kind,
            from_state=came_from.get(kind),
            to_state=to,
            detail={},
        )

    sources = CountSources(
        steps=[summary_of("a", S.SUCCEEDED), summary_of("b", S.SUCCEEDED)],
        events=[
            happened(1, "a", 0, "claimed", S.IN_FLIGHT),
            happened(2, "a", 1, "executed", S.WAITING_RETRY),  # a rate limit: 1 s in
            happened(3, "a", 3.9, "claimed", S.IN_FLIGHT),
            happened(4, "a", 4, "executed", S.SUCCEEDED),
            happened(5, "b", 0, "claimed", S.IN_FLIGHT),
            happened(6, "b", 2, "executed", S.VERIFYING),  # a 502 after the write
            happened(7, "b", 2.5, "looked_up", S.SUCCEEDED),
        ],
    )
    waits = waits_by_scenario(sources, {"a": "rate_limit", "b": "502_after_store"})
    assert list(waits) == ["502_after_store", "rate_limit"]
    assert (waits["rate_limit"].count, waits["rate_limit"].max) == (1, 3.0)
    assert (waits["502_after_store"].count, waits["502_after_store"].max) == (1, 0.5)
    assert waits_by_scenario(sources, {})["?"].count == 2  # refs it does not name
