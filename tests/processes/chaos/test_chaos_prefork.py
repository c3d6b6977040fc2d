"""``toolsafe chaos --pool prefork``: every SIGKILL at a fault point hits the pool process
running the call, on a worker that stays up (it replaces the process and sends the step
to verification at once). Zero violations, no worker exit, and a recovery figure for
every kill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes.chaos.test_chaos import chaos_database  # noqa: F401 - the fixture
from toolsafe.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_pool_processes_killed_on_live_workers_keep_the_invariant(
    chaos_database: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report_path = tmp_path / "report.json"
    code = main(
        [
            "chaos",
            "--pool", "prefork",
            "--concurrency", "2",
            "--database", chaos_database,
            "--steps", "60",
            "--workers", "2",
            "--kills", "12",
            "--broker-flushes", "0",
            "--db-kill-rounds", "0",
            "--duplicates", "10",
            "--seed", "24",
            "--bound", "150",
            "--workdir", str(tmp_path / "run"),
            "--report", str(report_path),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text("utf-8"))
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["settled"], printed
    assert report["pool"] == "prefork"
    assert report["kills_fired"] == report["kills_planned"], printed
    # The kills struck pool processes: no worker exited, none was restarted.
    assert report["worker_exits"] == {}, printed
    # Every killed step settled again, and the report says how long each took.
    assert report["kill_recovery"]["count"] == sum(report["kills_fired"].values()), printed
    assert "kill → final or waiting on the agent (12 kills)" in printed
