"""The chaos run's pure parts: the seeded schedule and the invariant (no I/O)."""

from __future__ import annotations

import pytest

from toolsafe.chaos.plan import (
    Observed,
    ScheduleSize,
    Timing,
    build_schedule,
    check_invariant,
    corrected_input,
    scenarios,
    step_input,
)
from toolsafe.harness import BrokerError, check_broker, redis_db
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import POINTS

S = StepState
SIZE = ScheduleSize(steps=300, kills=30, broker_flushes=1, db_kill_rounds=2, duplicates=60)


def test_the_same_seed_gives_the_same_schedule() -> None:
    first, second = build_schedule(6, SIZE), build_schedule(6, SIZE)
    assert first == second
    assert first.fingerprint() == second.fingerprint()
    other = build_schedule(7, SIZE)
    assert other.fingerprint() != first.fingerprint()
    assert [s.scenario for s in other.steps] != [s.scenario for s in first.steps]


def test_kills_are_spread_over_every_fault_point_on_steps_that_reach_it() -> None:
    schedule = build_schedule(6, SIZE)
    assert schedule.kills() == {point: 5 for point in POINTS}
    by_name = {scenario.name: scenario for scenario in scenarios(Timing())}
    for step in schedule.steps:
        if step.kill_at == "during_call":
            assert by_name[step.scenario].long_call, step
        if step.kill_at in ("before_publish", "after_publish"):
            assert by_name[step.scenario].follow_up, step


def test_the_schedule_holds_every_fault_kind_in_order() -> None:
    schedule = build_schedule(6, SIZE)
    submitted = [i for a in schedule.actions if a.kind == "submit" for i in a.steps]
    assert submitted == list(range(300))
    assert schedule.count("flush_broker") == 1
    assert schedule.count("kill_db_connections") == 2
    assert schedule.duplicates() == 60
    seen: set[int] = set()
    for action in schedule.actions:
        if action.kind == "submit":
            seen.update(action.steps)
        elif action.kind == "duplicate":
            assert set(action.steps) <= seen  # duplicates only of steps already submitted
    # The flush waits until at least half the steps were submitted.
    flush = next(n for n, a in enumerate(schedule.actions) if a.kind == "flush_broker")
    before = sum(len(a.steps) for a in schedule.actions[:flush] if a.kind == "submit")
    assert before >= 150


def test_database_restarts_are_scheduled_after_a_third_of_the_steps() -> None:
    from dataclasses import replace

    plain = build_schedule(6, SIZE)
    assert plain.count("restart_database") == 0
    schedule = build_schedule(6, replace(SIZE, db_restarts=2))
    assert schedule.count("restart_database") == 2
    assert schedule == build_schedule(6, replace(SIZE, db_restarts=2))
    first = next(n for n, a in enumerate(schedule.actions) if a.kind == "restart_database")
    before = sum(len(a.steps) for a in schedule.actions[:first] if a.kind == "submit")
    assert before >= 100
    # The scenarios and kills do not move when restarts are added.
    assert schedule.steps == plain.steps


def test_redis_restarts_strike_while_steps_are_still_arriving() -> None:
    from dataclasses import replace

    plain = build_schedule(6, SIZE)
    assert plain.count("restart_broker") == 0
    schedule = build_schedule(6, replace(SIZE, redis_restarts=10))
    assert schedule.count("restart_broker") == 10
    assert schedule == build_schedule(6, replace(SIZE, redis_restarts=10))
    submits = [n for n, a in enumerate(schedule.actions) if a.kind == "submit"]
    for number, action in enumerate(schedule.actions):
        if action.kind == "restart_broker":
            # After the first batch, before the last: work is in flight and more comes.
            assert submits[0] < number < submits[-1]
    # The scenarios, kills and the other faults do not move when restarts are added.
    assert schedule.steps == plain.steps
    others = [a for a in schedule.actions if a.kind != "restart_broker"]
    assert others == list(plain.actions)


def test_every_scenario_is_used_evenly() -> None:
    schedule = build_schedule(1, ScheduleSize(steps=100, kills=0))
    names = [step.scenario for step in schedule.steps]
    assert {names.count(s.name) for s in scenarios(Timing())} == {10}


def test_more_kills_than_eligible_steps_plans_what_it_can() -> None:
    schedule = build_schedule(2, ScheduleSize(steps=10, kills=60, duplicates=0))
    assert sum(schedule.kills().values()) <= 10


def test_inputs_and_corrections() -> None:
    by_name = {scenario.name: scenario for scenario in scenarios(Timing())}
    bad = step_input(by_name["input_fix"], 7)
    fixed = corrected_input(by_name["input_fix"], 7)
    assert bad["recipient_email"] == "user7@exmaple.com"
    assert fixed == {**bad, "recipient_email": "user7@example.com"}
    assert step_input(by_name["clean_success"], 3)["amount_cents"] == 103


def test_eventual_consistency_must_stay_inside_the_window() -> None:
    with pytest.raises(ValueError, match="consistency window"):
        Timing(consistency_window=1.0, visible_after=2.0)


def observed(state: StepState, commit_state: str | None = None) -> Observed:
    return Observed(state, commit_state)


def test_the_invariant_holds_for_honest_outcomes() -> None:
    verdict = check_invariant(
        ["a", "b", "c", "d", "e"],
        {
            "a": observed(S.SUCCEEDED, "committed"),
            "b": observed(S.ESCALATED, "not_committed"),  # conflict, nothing written
            "c": observed(S.ESCALATED, "unknown"),  # written, lookup down: escalated
            "d": observed(S.NEEDS_INPUT, "not_committed"),  # waits on a human
            "e": observed(S.FAILED, "not_committed"),
        },
        {"a": 1, "c": 1},
    )
    assert verdict.violations == ()


@pytest.mark.parametrize(
    ("step", "effects", "rule"),
    [
        (observed(S.SUCCEEDED, "committed"), 2, "duplicate_effect"),
        (observed(S.SUCCEEDED, "committed"), 0, "success_without_effect"),
        (observed(S.ESCALATED, "not_committed"), 1, "effect_not_reported"),
        (observed(S.NEEDS_INPUT, "not_committed"), 1, "effect_not_reported"),
        (observed(S.FAILED, None), 1, "effect_not_reported"),
        (observed(S.VERIFYING, "unknown"), 1, "stuck"),
        (observed(S.PENDING, None), 0, "stuck"),
        (observed(S.IN_FLIGHT, None), 0, "stuck"),
    ],
)
def test_each_rule_catches_its_violation(step: Observed, effects: int, rule: str) -> None:
    verdict = check_invariant(["x"], {"x": step}, {"x": effects})
    assert rule in verdict.by_rule, verdict


def test_lost_and_stray_writes_are_violations() -> None:
    verdict = check_invariant(["x"], {}, {"-": 1, "other": 1})
    assert verdict.by_rule == {"lost": 1, "stray_effect": 2}
    assert "x: lost" in str(verdict.violations[0])


def test_the_broker_must_be_a_dedicated_redis_db() -> None:
    assert redis_db("redis://127.0.0.1:6379/9") == 9
    assert redis_db("redis://127.0.0.1:6379") == 0
    check_broker("redis://127.0.0.1:6379/9")
    for bad in ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379", "amqp://guest@x//"):
        with pytest.raises(BrokerError):
            check_broker(bad)


def test_toolsafe_chaos_refuses_db_0_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from toolsafe.cli.main import main

    database = "postgresql://postgres@127.0.0.1:1/never_touched"
    assert main(["chaos", "--broker", "redis://127.0.0.1:6379/0", "--database", database]) == 2
    assert "dedicated Redis db other than 0" in capsys.readouterr().err


def test_a_deduplicating_run_adds_a_slow_store_and_leaves_the_naive_schedule_alone() -> None:
    timing = Timing()
    naive = {scenario.name for scenario in scenarios(timing)}
    deduplicating = {s.name: s for s in scenarios(timing, deduplicating=True)}
    assert set(deduplicating) == naive | {"slow_store"}
    [held] = deduplicating["slow_store"].faults
    # Past the window (the lookup says "not found" while the key is in flight), within
    # the time limit (a naive run, waiting that out, would find the record instead).
    assert held["fault"] == "stall_before_store"
    assert timing.consistency_window < held["seconds"] < timing.time_limit
    assert build_schedule(6, SIZE) == build_schedule(6, SIZE, deduplicating=False)
    with_slow = build_schedule(6, SIZE, deduplicating=True)
    assert "slow_store" in {step.scenario for step in with_slow.steps}
    assert with_slow.kills() == build_schedule(6, SIZE).kills()
