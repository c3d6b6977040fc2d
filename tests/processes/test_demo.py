"""``toolsafe demo`` end to end — the README's first command — on the embedded default
(SQLite, file-system broker) through the installed script, and on Redis + PostgreSQL
as ``python -m toolsafe demo`` from the suite's preloaded interpreter
(toolsafe/harness/preload.py), with its workers and beat forked from it too: the same
command and the same processes, without a second of imports each."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolsafe.demo.scenarios import ARTICLE, CRASH
from toolsafe.harness import flush_broker, preload

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


class Demo:
    """One ``toolsafe demo`` subprocess, started at once and waited for later, so that the
    two demos of this module run at the same time (each takes half a minute, most of it
    waiting on its workers)."""

    def __init__(self, directory: Path, *options: str, preloaded: bool = False) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSAFE_")}
        self.report = directory / "report.json"
        self._out = (directory / "stdout.txt").open("w+", encoding="utf-8")
        self._err = (directory / "stderr.txt").open("w+", encoding="utf-8")
        args = ["demo", "--report", str(self.report), *options]
        self.process: subprocess.Popen[str] | preload.Preloaded
        if preloaded:
            self.process = preload.Preloaded(
                [sys.executable, "-m", "toolsafe", *args],
                env=env,
                cwd=ROOT,
                log_path=directory / "stdout.txt",
                err_path=directory / "stderr.txt",
                preload_children=True,
            )
        else:
            self.process = subprocess.Popen(
                [*_toolsafe(), *args],
                cwd=ROOT,
                env=env,
                stdout=self._out,
                stderr=self._err,
                text=True,
            )

    def result(self, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            raise
        finally:
            self._out.seek(0)
            self._err.seek(0)
            out, err = self._out.read(), self._err.read()
            self._out.close()
            self._err.close()
        return subprocess.CompletedProcess(self.process.args, code, out, err)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._out.close()
        self._err.close()


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
    # An unknown outcome is never executed twice: EXPECTED above asks for one effect at
    # the naive downstream (which stores every duplicate) after a pass through verifying.
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


@pytest.fixture(scope="module")
def embedded_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo on the embedded default, started when the module starts: it plays while
    the Redis + PostgreSQL demo does, and its test collects the result."""
    demo = Demo(tmp_path_factory.mktemp("embedded_demo"))
    try:
        yield demo
    finally:
        demo.stop()


@pytest.fixture(autouse=True, scope="module")
def _demos_run_together(embedded_demo: Demo) -> None:
    """Start the embedded demo before the first test of the module runs."""


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
    demo = Demo(tmp_path, "--broker", redis_url, "--database", demo_database, preloaded=True)
    try:
        done = demo.result()
    finally:
        demo.stop()
        # Beat kept publishing sweeps until the end: leave the session's Redis database
        # as the conftest handed it over (its lock key stays).
        flush_broker(redis_url)
    _assert_report(done, demo.report)
    assert "broker    redis://" in done.stdout
    assert "store     postgresql" in done.stdout


@pytest.mark.slow
def test_demo_runs_on_the_embedded_default(embedded_demo: Demo) -> None:
    _assert_report(embedded_demo.result(), embedded_demo.report)
