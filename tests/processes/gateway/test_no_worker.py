"""Honest waits: with no worker consuming, a ``?wait`` answers at once with the step as
it is (queued) and the ``no_worker`` hint; once a worker runs (its heartbeat in the
store), the same wait is held and ends with the envelope. A real ``toolsafe serve``, a
real worker, PostgreSQL and Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.gateway.harness import bearer, gateway_for, make_key
from tests.support.pipeline.harness import WORKER_STARTUP, cluster_for, new_ref
from toolsafe.harness import child_env, preload

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
WAIT = 30  # the wait asked for; without a worker the answer must come well before it


def _workers(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "toolsafe", "workers", *args]
    return preload.run(command, env=child_env(env), cwd=cwd, timeout=60)


def test_a_wait_with_no_worker_answers_at_once_with_the_hint(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    with cluster_for(pg_url, redis_url, tmp_path, suffix="noworker") as cluster:
        token = make_key(cluster.env["TOOLSAFE_DATABASE_URL"], "nw", "agent")
        with (
            gateway_for(cluster.env, tmp_path) as server,
            httpx.Client(base_url=server.url, headers=bearer(token), timeout=WAIT + 30) as http,
        ):
            ref = new_ref("nw")
            made = http.post(
                "/v1/tools/create_invoice/calls",
                json={"input": INVOICE},
                headers={"Idempotency-Key": ref},
            )
            assert made.status_code == 201, made.text
            started = time.monotonic()
            waited = http.get(f"/v1/calls/{ref}", params={"wait": WAIT})
            assert time.monotonic() - started < WAIT / 2
            view = waited.json()
            assert view["state"] == "pending" and view["hint"] == "no_worker", view
            assert cluster.effects(made.json()["operation_ref"]) == 0

            assert _workers(cluster.env, tmp_path).returncode == 1
            worker = cluster.start_worker("nw", concurrency=1)
            worker.wait_ready(WORKER_STARTUP)
            # The readiness check of docs/operations.md: this node consumes.
            listed = _workers(cluster.env, tmp_path, "--json")
            assert listed.returncode == 0, listed.stderr
            (node,) = [row["name"] for row in json.loads(listed.stdout) if row["alive"]]
            assert _workers(cluster.env, tmp_path, "--node", node).returncode == 0
            assert _workers(cluster.env, tmp_path, "--node", "other@x").returncode == 1
            settled = http.get(f"/v1/calls/{ref}", params={"wait": WAIT}).json()
            assert settled["state"] == "succeeded" and settled["hint"] is None, settled
            assert cluster.effects(settled["operation_ref"]) == 1
