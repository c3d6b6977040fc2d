"""``toolsafe chaos --partitions --pool prefork``: one worker of the run cut off from
PostgreSQL and Redis (a black-holing proxy) while one of its pool processes holds a
lease, longer than the lease, and healed; SIGKILLs strike pool processes of live
workers, which replace them. A handful of steps, and the run's checks stay at zero
violations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes.chaos.test_chaos import chaos_database  # noqa: F401 - the fixture
from tests.support.chaos_kills import assert_planned_kills_fired
from tests.support.chaos_runs import run_chaos

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_a_partitioned_worker_and_killed_pool_processes_keep_the_invariant(
    chaos_database: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, printed, report = run_chaos(
        [
            "--partitions", "2",
            "--pool", "prefork",
            "--database", chaos_database,
            "--steps", "20",
            "--batch", "5",
            "--workers", "2",
            "--kills", "6",
            "--broker-flushes", "0",
            "--db-kill-rounds", "0",
            "--duplicates", "0",
            "--seed", "29",
            "--bound", "120",
        ],
        tmp_path,
        capsys,
    )  # fmt: skip
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["faults"]["worker partition"] == 2, printed
    # Cut off, not killed, and the kills struck pool processes: no worker exited.
    assert report["worker_exits"] == {}, printed
    assert report["unplanned_worker_exits"] == 0
    assert report["pool"] == "prefork"
    assert_planned_kills_fired(report, printed, concurrency=2)
    # Every killed step settled again, and the report says how long each took.
    kills = sum(report["kills_fired"].values())
    assert report["kill_recovery"]["count"] == kills, printed
    assert f"kill → final or waiting on the agent ({kills} kills)" in printed
    # ... and by the killed step's scenario, each kill counted once.
    by_scenario = report["kill_recovery_by_scenario"]
    assert sum(seconds["count"] for seconds in by_scenario.values()) == kills, by_scenario
    assert "?" not in by_scenario, by_scenario
    assert "by the killed step's scenario (kills, p50 / max): " in printed
    assert "invariant violations: 0" in printed
