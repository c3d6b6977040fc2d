"""``toolsafe chaos --partitions``: one worker of the run cut off from PostgreSQL and
Redis (a black-holing proxy) while it holds a lease, longer than the lease, and healed;
a handful of steps, and the run's checks stay at zero violations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes.chaos.test_chaos import chaos_database  # noqa: F401 - the fixture
from toolsafe.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_a_partitioned_worker_keeps_the_invariant(
    chaos_database: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report_path = tmp_path / "report.json"
    code = main(
        [
            "chaos",
            "--partitions", "2",
            "--database", chaos_database,
            "--steps", "20",
            "--batch", "5",
            "--workers", "2",
            "--kills", "0",
            "--broker-flushes", "0",
            "--db-kill-rounds", "0",
            "--duplicates", "0",
            "--seed", "29",
            "--bound", "120",
            "--workdir", str(tmp_path / "run"),
            "--report", str(report_path),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text("utf-8"))
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["faults"]["worker partition"] == 2, printed
    # Cut off, not killed: the partitioned worker never exited.
    assert report["worker_exits"] == {}, printed
    assert report["unplanned_worker_exits"] == 0
    assert "invariant violations: 0" in printed
