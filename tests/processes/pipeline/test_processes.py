"""The processes an operator runs: ``toolsafe worker``, ``toolsafe beat`` and Flower
(``celery -A toolsafe flower`` lists the running worker through its HTTP API), and a
worker that refuses to start when an adapter module is missing."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.pipeline.harness import ROOT, Cluster, cluster_for
from toolsafe.harness import WaitTimeout, celery_command, free_port, spawn, start_beat, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="flower") as running:
        running.start_worker("flowered", concurrency=1, beat=False, pool="solo", via_cli=True)
        yield running


def test_flower_lists_the_running_worker(cluster: Cluster, pipeline_dir: Path) -> None:
    # Flower needs its port up front to be reachable; the OS picks a free one.
    port = free_port()
    env = {**os.environ, **cluster.env, "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = spawn(
        "flower",
        celery_command("toolsafe", "flower", "--address=127.0.0.1", f"--port={port}",
                       f"--db={pipeline_dir / 'flower.db'}"),
        env=env, directory=pipeline_dir, cwd=ROOT,
    )  # fmt: skip
    worker = cluster.workers[0].name
    seen: dict[str, object] = {}

    def listed() -> bool:
        nonlocal seen
        assert flower.alive(), flower.text()
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.get(
                f"http://127.0.0.1:{port}/api/workers", params={"refresh": "1"}, timeout=5
            )
            if answer.status_code == 200:
                seen = answer.json()
        return worker in " ".join(seen)

    try:
        with contextlib.suppress(WaitTimeout):  # the assertions below say what is missing
            wait_until(listed, 30, "flower to list the worker", interval=0.3)
    finally:
        flower.stop()
    names = list(seen)
    assert any(name.startswith(worker) for name in names), (names, flower.text())
    info = next(value for name, value in seen.items() if name.startswith(worker))
    assert isinstance(info, dict)
    queues = {queue["name"] for queue in info.get("active_queues", [])}
    assert {"toolsafe.execute", "toolsafe.verify", "toolsafe.escalations"} <= queues


SWEEP_DONE = re.compile(r"Task toolsafe\.sweep\[[0-9a-f-]{36}\] succeeded in ")


def test_toolsafe_beat_schedules_the_sweeper(cluster: Cluster, pipeline_dir: Path) -> None:
    beat = start_beat(
        env={**os.environ, **cluster.env},
        directory=pipeline_dir,
        schedule=pipeline_dir / "beat-schedule",
        cwd=ROOT,
    )
    worker = cluster.workers[0]
    try:
        # The banner already names toolsafe.sweep: wait for a sweep task that ran.
        cluster.wait_for(
            lambda: SWEEP_DONE.search(worker.text()) is not None,
            timeout=30,
            what="a sweep sent by beat and run by the worker",
        )
    finally:
        beat.stop()
    assert "Sending due task toolsafe-sweep" in beat.text()


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
