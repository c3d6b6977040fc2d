"""The processes an operator runs: ``toolsafe worker``, ``toolsafe beat`` and Flower
(``celery -A toolsafe flower`` lists the running worker through its HTTP API), and a
worker that refuses to start when an adapter module is missing."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.pipeline.harness import ROOT, Cluster, cluster_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="flower") as running:
        running.start_worker("flowered", concurrency=1, beat=False, pool="solo", via_cli=True)
        yield running


def _free_port() -> int:
    # Flower needs the port up front to be reachable; the OS picks a free one.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_flower_lists_the_running_worker(cluster: Cluster, pipeline_dir: Path) -> None:
    port = _free_port()
    log = pipeline_dir / "flower.log"
    env = {**os.environ, **cluster.env, "FLOWER_UNAUTHENTICATED_API": "true"}
    with log.open("wb") as out:
        flower = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "toolsafe", "flower",
             "--address=127.0.0.1", f"--port={port}", f"--db={pipeline_dir / 'flower.db'}"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    worker = cluster.workers[0].name
    seen: dict[str, object] = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and worker not in " ".join(seen):
            assert flower.poll() is None, log.read_text(errors="replace")
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/workers", params={"refresh": "1"}, timeout=5
                )
                if answer.status_code == 200:
                    seen = answer.json()
            time.sleep(0.3)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(10)
    names = list(seen)
    assert any(name.startswith(worker) for name in names), (names, log.read_text())
    info = next(value for name, value in seen.items() if name.startswith(worker))
    assert isinstance(info, dict)
    queues = {queue["name"] for queue in info.get("active_queues", [])}
    assert {"toolsafe.execute", "toolsafe.verify", "toolsafe.escalations"} <= queues


def test_toolsafe_beat_schedules_the_sweeper(cluster: Cluster, pipeline_dir: Path) -> None:
    env = {**os.environ, **cluster.env}
    log = pipeline_dir / "beat.log"
    with log.open("wb") as out:
        beat = subprocess.Popen(
            [sys.executable, "-m", "toolsafe", "beat", "-s", str(pipeline_dir / "beat-schedule"),
             "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    worker = cluster.workers[0]
    try:
        cluster.wait_for(
            lambda: "toolsafe.sweep" in worker.text() and "succeeded" in worker.text(),
            timeout=30,
            what="a sweep sent by beat and run by the worker",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(beat.pid, signal.SIGTERM)
        beat.wait(10)
    assert "Sending due task toolsafe-sweep" in log.read_text(errors="replace")


def test_a_worker_with_a_missing_adapter_module_refuses_to_start(cluster: Cluster) -> None:
    env = {
        **os.environ,
        **cluster.env,
        "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples, no_such_adapters",
    }
    finished = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "toolsafe", "worker", "-P", "solo"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert finished.returncode != 0
    assert "cannot start the worker" in finished.stderr
    assert "no_such_adapters" in finished.stderr
