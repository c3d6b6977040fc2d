"""The CI chaos run: 300 steps, 3 real workers, 30 SIGKILLs over every fault point, a
broker flush, a round of PostgreSQL connection kills and, where this machine lets the
tests restart the local PostgreSQL server (always in CI), one server restart — and zero
violations."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolsafe.cli.main import main
from toolsafe.tasks.faults import POINTS

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

# conftest's lock on the session's Redis db: a broker flush must leave it in place.
REDIS_LOCK_KEY = "toolsafe-test-session-lock"


IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def pg_restart_command() -> str | None:
    """How to restart the local PostgreSQL cluster, when the tests may (root, Debian's
    pg_ctlcluster, one cluster); CI runs as root on such a machine and must restart it."""
    clusters = Path("/etc/postgresql")
    versions = sorted(p.name for p in clusters.iterdir()) if clusters.is_dir() else []
    usable = (
        shutil.which("pg_ctlcluster") is not None
        and hasattr(os, "geteuid")
        and os.geteuid() == 0
        and len(versions) == 1
        and (clusters / versions[0] / "main").is_dir()
    )
    if not usable:
        assert not IN_CI, "CI must be able to restart PostgreSQL for the chaos run"
        return None
    return f"pg_ctlcluster --skip-systemctl-redirect {versions[0]} main restart"


@pytest.fixture
def chaos_database(pg_url: str) -> Iterator[str]:
    """A database of the run's own: the run kills every other connection to it."""
    import psycopg

    name = f"chaos_{uuid.uuid4().hex[:10]}"
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_chaos_run_keeps_the_invariant(
    chaos_database: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    restart = pg_restart_command()
    restart_options = ["--db-restarts", "1", "--pg-restart-command", restart] if restart else []
    code = main(
        [
            "chaos",
            "--broker", redis_url,
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
            "--keep-key", REDIS_LOCK_KEY,
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
    assert report["faults"]["broker flush"] == 1
    assert report["faults"]["postgres connection-kill round"] == 1
    if restart:
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
    assert report["exported"]["counts up"] == 1.0  # a worker served /metrics
    assert "invariant violations: 0" in printed
