"""The CI chaos run: 300 steps, 3 real workers, 30 SIGKILLs over every fault point, a
broker flush, a round of PostgreSQL connection kills and one real restart of a
PostgreSQL server the test starts for itself — and zero violations."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.private_postgres import private_postgres
from toolsafe.cli.main import main
from toolsafe.tasks.faults import POINTS

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def chaos_cluster() -> Iterator[tuple[str, str]]:
    """A PostgreSQL server of the run's own (its database URL and restart command): the
    run restarts it for real and kills every connection to it, disturbing no one else."""
    with private_postgres() as cluster:
        url = cluster.create_database("chaos")
        yield url.replace("postgresql://", "postgresql+psycopg://"), cluster.restart_command


@pytest.fixture
def chaos_database(pg_url: str) -> Iterator[str]:
    """A database of the run's own on the shared server (for runs that do not restart
    the database server): the run kills every other connection to it."""
    import psycopg

    name = f"chaos_{uuid.uuid4().hex[:10]}"
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_chaos_run_keeps_the_invariant(
    chaos_cluster: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chaos_database, restart = chaos_cluster
    report_path = tmp_path / "report.json"
    restart_options = ["--db-restarts", "1", "--pg-restart-command", restart]
    code = main(
        [
            "chaos",
            # A Redis server of the run's own, killed with SIGKILL and started again once.
            "--redis-restarts", "1",
            "--database", chaos_database,
            "--steps", "300",
            "--workers", "3",
            "--kills", "30",
            "--broker-flushes", "1",
            "--db-kill-rounds", "1",
            "--duplicates", "60",
            "--seed", "6",
            "--bound", "150",
            "--workdir", str(tmp_path / "run"),
            "--report", str(report_path),
            *restart_options,
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text("utf-8"))
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["settled"], printed
    assert report["steps"] == 300
    # Every planned kill fired, five at each named point, and each killed its worker.
    assert report["kills_fired"] == {point: 5 for point in POINTS}, printed
    assert report["worker_exits"].get("SIGKILL", 0) >= 30, printed
    # No worker died of anything but those kills, not even of the Redis restart.
    assert report["unplanned_worker_exits"] == 0, printed
    assert report["faults"]["redis server restart"] == 1
    assert report["faults"]["broker flush"] == 1
    assert report["faults"]["postgres connection-kill round"] == 1
    assert report["faults"]["postgres server restart"] == 1
    assert report["faults"]["duplicate execute message"] > 0
    assert report["agent"]["corrected input"] == 30
    assert report["agent"]["approvals"] == 30
    counts = report["counts"]
    assert counts["steps"] == 300
    assert counts["unknown_outcomes"]["found_committed"] >= 90  # stall / 502 scenarios
    assert counts["unknown_outcomes"]["open"] == 0
    assert counts["duplicate_writes_prevented"]["total"] > 0
    assert counts["final_escalations_by_reason"].get("VERSION_CONFLICT") == 30
    assert report["exported"]["counts up"] == 1.0  # the store-wide exporter followed it all
    assert "invariant violations: 0" in printed


def test_ten_hard_redis_restarts_under_load_kill_no_worker(
    chaos_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's own Redis server SIGKILLed and started again 10 times while steps flow
    (no other fault): no worker exits, and every step ends in its scenario's expected
    state; a succeeded step has exactly one downstream effect (the invariant: at most one,
    and none is a violation), an escalated conflict none."""
    from toolsafe.chaos.plan import Timing, scenarios

    report_path = tmp_path / "report.json"
    code = main(
        [
            "chaos",
            "--redis-restarts", "10",
            "--database", chaos_database,
            "--steps", "300",
            "--workers", "3",
            "--kills", "0",
            "--broker-flushes", "0",
            "--db-kill-rounds", "0",
            "--duplicates", "0",
            "--seed", "11",
            "--bound", "150",
            "--workdir", str(tmp_path / "run"),
            "--report", str(report_path),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text("utf-8"))
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["faults"]["redis server restart"] == 10, printed
    assert len(report["broker_restart_seconds"]) == 10
    assert report["worker_exits"] == {}, printed
    assert report["unplanned_worker_exits"] == 0
    expected = {s.name: {s.expected.value: 30} for s in scenarios(Timing())}
    assert report["scenarios"] == expected, printed
    assert report["counts"]["unknown_outcomes"]["open"] == 0
