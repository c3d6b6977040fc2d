"""Processes a supervisor can trust: ``toolsafe worker`` whose pool child is killed while
it starts either consumes anyway or exits non-zero and says why; ``toolsafe beat`` with
its broker down writes one line per outage, not a traceback per sweep. Real processes,
a ``redis-server`` of the test's own."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolsafe.harness import Process, child_env, spawn, start_beat, toolsafe_command, wait_until
from toolsafe.harness.redis_server import RedisServer
from toolsafe.harness.workers import WORKER_READY
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.store.sql.workers import WorkerRegistry

pytestmark = [pytest.mark.slow]

SWEEP = 0.5  # the sweep interval: beat tries to publish twice a second


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.stop()


def _env(tmp_path: Path, broker: str) -> dict[str, str]:
    database = f"sqlite:///{tmp_path / 'toolsafe.db'}"
    migrate(database)
    settings = {
        "TOOLSAFE_BROKER_URL": broker,
        "TOOLSAFE_DATABASE_URL": database,
        "TOOLSAFE_SWEEP_INTERVAL": str(SWEEP),
        "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
    }
    return {**child_env(settings), "PYTHONUNBUFFERED": "1"}


def _pool_children(pid: int) -> list[int]:
    """The forked children of ``pid`` (a pool child runs the parent's command line; a
    short-lived helper program that the worker's start-up runs does not)."""
    try:
        parent = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            forked = int(fields[1]) == pid and (entry / "cmdline").read_bytes() == parent
        except OSError:
            continue
        if forked:
            found.append(int(entry.name))
    return found


def _kill_a_pool_child(pid: int) -> bool:
    for child in _pool_children(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:  # gone between the listing and the kill
            continue
        return True
    return False


def test_a_pool_child_killed_at_start_up_leaves_a_consuming_worker_or_a_failed_exit(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    env = _env(tmp_path, redis_server.url(1))
    argv = toolsafe_command("worker", "--", "-P", "prefork", "-c", "2", "-l", "INFO")
    argv += ["-n", "startup@%h", "--without-mingle", "--without-gossip"]
    worker = spawn("worker", argv, env=env, directory=tmp_path, ready_marker=WORKER_READY)
    try:
        # The first pool child, killed as soon as it exists: before the worker is ready.
        wait_until(lambda: _kill_a_pool_child(worker.pid), 60, "a pool child killed", interval=0.01)
        assert WORKER_READY not in worker.text(), worker.tail()
        registry = WorkerRegistry(make_engine(env["TOOLSAFE_DATABASE_URL"]))

        def renewed() -> bool:
            # A worker that consumes renews its heartbeat after its start (tasks/liveness.py).
            return any(beat.last_seen > beat.started_at for beat in registry.all())

        wait_until(lambda: not worker.alive() or renewed(), 90, "an exit or a heartbeat")
        if worker.alive():
            assert WORKER_READY in worker.text(), worker.tail()
        else:
            code = worker.returncode
            assert code is not None and code != 0, worker.tail()
            assert "stopped with exit code" in worker.text(), worker.tail()
            assert "Could not start worker processes" in worker.text(), worker.tail()
    finally:
        worker.stop()


def _said(process: Process, text: str, times: int) -> Callable[[], bool]:
    return lambda: process.text().count(text) == times


def test_beat_with_its_broker_down_writes_one_line_per_outage(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    env = _env(tmp_path, redis_server.url(1))
    beat = start_beat(env=env, directory=tmp_path, schedule=tmp_path / "schedule")
    try:
        beat.wait_ready(60)
        wait_until(lambda: "Sending due task" in beat.text(), 30, "a sweep sent")
        for outage in (1, 2):
            redis_server.kill()
            # Long enough for many sweeps (every SWEEP seconds) to fall due.
            time.sleep(SWEEP * 16)
            down = [line for line in beat.text().splitlines() if "cannot be reached" in line]
            assert len(down) == outage, beat.tail()
            redis_server.restart(down=0)
            wait_until(
                _said(beat, "reachable again", outage),
                90,
                "beat saying the broker is back",
                context=beat.tail,
            )
        text = beat.text()
        assert "Traceback" not in text and "Message Error" not in text, beat.tail(60)
        assert beat.alive()
    finally:
        code = beat.stop()
    assert code == 0, beat.tail()
