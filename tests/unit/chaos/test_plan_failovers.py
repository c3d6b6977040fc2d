"""``toolsafe chaos --failovers N``: where the schedule puts the failovers, and what the
command refuses (no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from toolsafe.chaos.plan import ScheduleSize, build_schedule

SIZE = ScheduleSize(steps=300, kills=30, broker_flushes=1, db_kill_rounds=2, duplicates=60)


def test_failovers_strike_while_steps_are_still_arriving_and_move_nothing_else() -> None:
    plain = build_schedule(6, SIZE)
    assert plain.count("fail_over") == 0
    schedule = build_schedule(6, replace(SIZE, failovers=3))
    assert schedule.count("fail_over") == 3
    assert schedule == build_schedule(6, replace(SIZE, failovers=3))
    submits = [n for n, a in enumerate(schedule.actions) if a.kind == "submit"]
    for number, action in enumerate(schedule.actions):
        if action.kind == "fail_over":
            assert submits[0] < number < submits[-1]
    # Scenarios, kills and every other fault stay where the seed put them.
    assert schedule.steps == plain.steps
    assert [a for a in schedule.actions if a.kind != "fail_over"] == list(plain.actions)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--database", "postgresql://postgres@127.0.0.1:1/never"], "leave out --database"),
        (["--db-restarts", "1", "--pg-restart-command", "true"], "leave out --database"),
        (["--failovers", "-1"], "must not be negative"),
    ],
)
def test_toolsafe_chaos_refuses_failovers_on_a_database_it_does_not_own(
    extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsafe.cli.main import main

    argv = ["chaos", "--broker", "redis://127.0.0.1:6379/9", "--failovers", "1", *extra]
    assert main(argv) == 2
    assert said in capsys.readouterr().err
