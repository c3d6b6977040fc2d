"""``toolsafe chaos --hint-relay``: submits are their commits and the workers' hint
relays publish the hints, under SIGKILLs, a broker flush and killed database
connections. A small run of its own, beside the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes.chaos.test_chaos import chaos_database  # noqa: F401 - the fixture
from tests.support.chaos_runs import run_chaos
from toolsafe.chaos.plan import Timing, scenarios

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_the_hint_relay_keeps_the_invariant_under_faults(
    chaos_database: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every step ends as its scenario says, with no duplicate effect and no step lost:
    the relays' hints lost with the broker's queues, or their statements with the
    database's connections, are sent again (R7)."""
    code, printed, report = run_chaos(
        [
            "--hint-relay",
            "--database", chaos_database,
            "--steps", "60",
            "--workers", "2",
            "--pool", "prefork",
            "--kills", "10",
            "--broker-flushes", "1",
            "--db-kill-rounds", "1",
            "--duplicates", "10",
            "--seed", "17",
            "--bound", "150",
        ],
        tmp_path,
        capsys,
    )  # fmt: skip
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["settled"] and report["submit_hints"] == "relay", printed
    assert "submits' hints: published by the workers' relays" in printed
    known = scenarios(Timing())
    assert report["scenarios"] == {s.name: {s.expected.value: 60 // len(known)} for s in known}
    assert report["unplanned_worker_exits"] == 0, printed
