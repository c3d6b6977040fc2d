"""``toolsafe chaos --failovers 2 --partitions 1``: the run's database is a PostgreSQL
primary with a synchronous standby of its own, reached through a multi-host URL; twice
the primary is killed while steps flow, the standby promoted and a new standby cloned.
One worker reaches both servers and the broker through fault proxies (one per server of
the URL), and is cut off once while it holds a lease. With SIGKILLed workers, duplicate
messages and a connection-kill round on top: zero violations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos_kills import assert_planned_kills_fired
from tests.support.chaos_runs import run_chaos
from toolsafe.chaos.plan import Timing, scenarios

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_two_failovers_and_a_partition_keep_the_invariant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, report = run_chaos(
        [
            "--failovers", "2",
            "--partitions", "1",
            "--steps", "150",
            "--workers", "3",
            "--kills", "10",
            "--broker-flushes", "0",
            "--db-kill-rounds", "1",
            "--duplicates", "20",
            "--seed", "3",
            "--bound", "150",
        ],
        tmp_path,
        capsys,
    )  # fmt: skip
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["settled"], printed
    assert report["faults"]["postgres failover"] == 2, printed
    assert len(report["failover_seconds"]) == 2
    assert report["faults"]["worker partition"] == 1, printed
    assert "target_session_attrs=read-write" in printed  # the run used the multi-host URL
    assert report["unplanned_worker_exits"] == 0, printed
    assert_planned_kills_fired(report, printed, concurrency=2)
    # Each step ends as its scenario says, however the failovers struck it.
    assert report["scenarios"] == {s.name: {s.expected.value: 15} for s in scenarios(Timing())}, (
        printed
    )
    unknown = report["counts"]["unknown_outcomes"]
    assert (unknown["open"], unknown["escalated"], unknown["cancelled"]) == (0, 0, 0)
