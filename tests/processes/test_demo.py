"""``toolsafe demo`` end to end — the README's first command — on the embedded default
(SQLite, file-system broker) and on Redis + PostgreSQL, through the installed script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from toolsafe.cli.main import build_parser
from toolsafe.demo.report import Played, path_lines, render
from toolsafe.demo.scenarios import ARTICLE, CRASH, Check, Result
from toolsafe.harness import flush_broker
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import EventRecord

ROOT = Path(__file__).resolve().parents[2]
TITLES = [title for _, title, _ in (*ARTICLE, CRASH)]


def _toolsafe() -> list[str]:
    """The console script next to this interpreter, as `make demo` runs it."""
    script = Path(sys.executable).with_name("toolsafe")
    if script.exists():
        return [str(script)]
    found = shutil.which("toolsafe")
    return [found] if found else [sys.executable, "-m", "toolsafe"]


# What must have happened to each scenario's step, judged from the store and the
# downstream's own count in the demo's --report, not from the demo's own checks:
# (final state, reason, downstream effects, states the path must pass through).
EXPECTED: dict[str, tuple[str, str | None, int, tuple[str, ...]]] = {
    "success": ("succeeded", None, 1, ("pending", "in_flight", "succeeded")),
    "invalid_recipient": ("succeeded", None, 1, ("needs_input", "pending", "succeeded")),
    "rate_limit": ("succeeded", None, 1, ("waiting_retry", "in_flight", "succeeded")),
    "approval": ("succeeded", None, 1, ("awaiting_approval", "pending", "succeeded")),
    "version_conflict": ("escalated", "VERSION_CONFLICT", 0, ("in_flight", "escalated")),
    "timeout_after_store": ("succeeded", None, 1, ("in_flight", "verifying", "succeeded")),
    "lookup_down": ("escalated", "LOOKUP_UNAVAILABLE", 1, ("verifying", "escalated")),
    "crash_recovery": ("succeeded", None, 1, ("in_flight", "verifying", "succeeded")),
}


def _run_demo(report: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSAFE_")}
    return subprocess.run(
        [*_toolsafe(), "demo", "--report", str(report), *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def _passes_through(path: list[str], states: tuple[str, ...]) -> bool:
    """Whether ``path`` visits ``states`` in this order (other states between them)."""
    remaining = iter(path)
    return all(any(seen == state for seen in remaining) for state in states)


def _assert_what_happened(report: Path) -> None:
    data = json.loads(report.read_text("utf-8"))
    seen = {scenario["name"]: scenario for scenario in data["scenarios"]}
    assert set(seen) == set(EXPECTED)
    for name, (state, reason, effects, through) in EXPECTED.items():
        step = seen[name]
        assert (step["state"], step["effects"]) == (state, effects), (name, step)
        if reason is not None:
            assert step["reason"] == reason, (name, step)
        assert _passes_through(step["path"], through), (name, step["path"])
    # An unknown outcome is never executed twice: verified, one attempt.
    for name in ("timeout_after_store", "crash_recovery"):
        assert seen[name]["attempts"] == 1, seen[name]
    # The crash: the worker that claimed the write is not the one that verified it.
    assert len(seen["crash_recovery"]["claimed_by"]) == 2, seen["crash_recovery"]
    assert "INVALID_RECIPIENT_ADDRESS" in seen["invalid_recipient"]["codes"]
    assert "RATE_LIMITED" in seen["rate_limit"]["codes"]


def _assert_report(done: subprocess.CompletedProcess[str], report: Path) -> None:
    output = done.stdout
    assert done.returncode == 0, f"{output}\n--- stderr ---\n{done.stderr[-5000:]}"
    _assert_what_happened(report)
    assert f"{len(TITLES)} of {len(TITLES)} scenarios ended as expected" in output
    for title in TITLES:
        assert f"{title} — as expected" in output, title
    assert "NOT AS EXPECTED" not in output
    assert "[FAIL]" not in output
    # Progress while it runs, then per step its path, the envelopes and the counts.
    assert "phase 1:" in output and "phase 2: crash recovery" in output
    assert "in_flight → needs_input (INVALID_RECIPIENT_ADDRESS)" in output
    assert "identical input refused: IDENTICAL_INPUT" in output
    assert '"code": "OUTCOME_UNKNOWN"' in output
    assert '"evidence_ref": "inv_' in output
    assert "SIGKILL worker" in output
    # The counts (toolsafe.recovery.counts): timeout, lookup down and crash were unknown outcomes.
    assert "unknown outcomes: 3" in output
    assert "LOOKUP_UNAVAILABLE 1" in output and "VERSION_CONFLICT 1" in output
    assert "downstream effects per operation_ref: at most 1" in output


@pytest.mark.slow
def test_demo_runs_on_the_embedded_default(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    _assert_report(_run_demo(report), report)


@pytest.fixture
def demo_database(pg_url: str) -> Iterator[str]:
    """A database of its own: the demo migrates it with Alembic from scratch."""
    import psycopg

    server, _, _ = pg_url.rpartition("/")
    admin = f"{server}/postgres".replace("postgresql+psycopg://", "postgresql://")
    name = f"toolsafe_demo_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    # The plain form the README shows; toolsafe reads it as psycopg 3.
    yield f"{server}/{name}".replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_demo_runs_on_redis_and_postgres(
    redis_url: str, demo_database: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    try:
        done = _run_demo(report, "--broker", redis_url, "--database", demo_database)
    finally:
        # Beat kept publishing sweeps until the end: leave the session's Redis database
        # as the conftest handed it over (its lock key stays).
        flush_broker(redis_url)
    _assert_report(done, report)
    assert "broker    redis://" in done.stdout
    assert "store     postgresql" in done.stdout


# ----------------------------------------------------------------------------- pure parts


def test_the_cli_offers_the_demo_with_its_options() -> None:
    args = build_parser().parse_args(
        ["demo", "--broker", "redis://h/3", "--database", "sqlite:///x", "--workers", "3"]
    )
    assert (args.broker, args.database, args.workers, args.keep) == (
        "redis://h/3",
        "sqlite:///x",
        3,
        False,
    )


def test_a_scenario_with_a_failed_check_or_an_error_is_not_as_expected() -> None:
    good = Result("a", "A", "r/a", [Check("ends succeeded", True)])
    failed = Result("b", "B", "r/b", [Check("ends succeeded", True), Check("one invoice", False)])
    broken = Result("c", "C", "r/c", [Check("ends succeeded", True)], error="TimeoutError: x")
    unchecked = Result("d", "D", "r/d")
    assert good.ok
    assert not failed.ok and not broken.ok and not unchecked.ok
    report = render([Played(r, None, [], 0) for r in (good, failed, broken)], {}, 1.0)
    assert "1. A — as expected" in report
    assert "2. B — NOT AS EXPECTED" in report
    assert "[FAIL] one invoice" in report
    assert "[FAIL] TimeoutError: x" in report
    assert "1 of 3 scenarios ended as expected" in report


def test_the_path_shows_times_states_and_who_claimed() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    S = StepState
    events = [
        EventRecord(1, "r", start, "submitted", None, S.PENDING, "submitted", {}),
        EventRecord(
            2,
            "r",
            start + timedelta(seconds=0.5),
            "claimed",
            S.PENDING,
            S.IN_FLIGHT,
            "claimed by a worker",
            {"claim": "execute", "owner": "host:41", "attempt": 1},
        ),
        EventRecord(
            3,
            "r",
            start + timedelta(seconds=2),
            "noop",
            S.IN_FLIGHT,
            S.IN_FLIGHT,
            "noop",
            {"reason": "claimed"},
        ),
    ]
    lines = path_lines(events, {41: "worker1"})
    assert "+  0.00s  submitted → pending" in lines[0]
    assert "pending → in_flight" in lines[1]
    assert "execution claimed by worker1 attempt 1" in lines[1]
    assert "+  2.00s  (stays in_flight)" in lines[2]
    assert "nothing to do: claimed" in lines[2]


# ----------------------------------------------------------------------------- the broker


def test_a_filesystem_broker_url_names_its_folder() -> None:
    from toolsafe.celeryconfig import filesystem_transport_options
    from toolsafe.settings import SettingsError

    assert filesystem_transport_options("redis://127.0.0.1:6379/0") == {}
    options = filesystem_transport_options("filesystem:///tmp/demo/broker")
    assert options["data_folder_in"] == options["data_folder_out"] == "/tmp/demo/broker/queue"
    assert options["control_folder"] == "/tmp/demo/broker/control"
    with pytest.raises(SettingsError, match="absolute folder"):
        filesystem_transport_options("filesystem://relative/broker")


def test_the_demo_broker_delivers_whole_messages_and_skips_partial_files(
    tmp_path: Path,
) -> None:
    from kombu.connection import Connection

    from toolsafe.broker.filesystem import Transport
    from toolsafe.celeryconfig import filesystem_transport_options

    url = f"filesystem://{tmp_path}/broker"
    for part in ("queue", "control", "processed"):
        (tmp_path / "broker" / part).mkdir(parents=True)
    # A message still being written has a name no consumer matches.
    (tmp_path / "broker" / "queue" / "partial-0123").write_bytes(b"")
    with Connection(  # type: ignore[no-untyped-call]
        url, transport=Transport, transport_options=filesystem_transport_options(url)
    ) as conn:
        queue = conn.SimpleQueue("demo")
        queue.put({"operation_ref": "run_1/step_1"})
        message = queue.get(timeout=2)
        assert message.payload == {"operation_ref": "run_1/step_1"}
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.2)
        queue.close()
    names = sorted(path.name for path in (tmp_path / "broker" / "queue").iterdir())
    assert names == ["partial-0123"]


def test_progress_hides_passwords_in_urls() -> None:
    from toolsafe.demo.env import _hide_password

    shown = _hide_password("postgresql+psycopg://toolsafe:s3cret@db:5432/toolsafe")
    assert shown == "postgresql+psycopg://toolsafe:***@db:5432/toolsafe"
    assert _hide_password("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"
    assert _hide_password("filesystem:///tmp/x/broker") == "filesystem:///tmp/x/broker"
