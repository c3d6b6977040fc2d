"""``toolsafe serve`` and ``toolsafe keys`` as a user runs them: the embedded default
with no settings at all, the gateway on SQLite with real workers, keys made by the CLI
(secret shown once, only a salted hash stored), and refusals at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from tests.support.gateway.harness import bearer, gateway_for
from tests.support.pipeline.harness import cluster_for, new_ref
from toolsafe.gateway.auth import CACHE_SECONDS
from toolsafe.gateway.client import GatewayClient, GatewayError
from toolsafe.harness import preload
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.schema import api_keys
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.keys import TOKEN_PATTERN
from toolsafe.recovery.store.sql.workers import WorkerRegistry
from toolsafe.tasks.runtime import utcnow

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}


def _bare_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}


def _toolsafe(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return preload.run([sys.executable, "-m", "toolsafe", *args], env=env, cwd=cwd, timeout=60)


def test_serve_starts_on_the_embedded_default_with_no_settings(tmp_path: Path) -> None:
    env = _bare_env()
    with gateway_for(env, tmp_path, "--no-auth") as server:
        tools = httpx.get(f"{server.url}/v1/tools", timeout=10).json()["tools"]
        assert {tool["name"] for tool in tools} >= {"create_invoice", "send_email"}
        made = httpx.post(
            f"{server.url}/v1/tools/create_invoice/calls", json={"input": INVOICE}, timeout=10
        )
        assert made.status_code == 201, made.text
        log = server.text()
    assert "embedded default" in log and "DEVELOPMENT MODE" in log
    assert (tmp_path / "toolsafe.db").exists() and (tmp_path / "toolsafe-broker").is_dir()


def test_waits_beyond_the_limit_are_429(tmp_path: Path) -> None:
    env = {**_bare_env(), "TOOLSAFE_GATEWAY_MAX_WAITS": "1", "TOOLSAFE_GATEWAY_MAX_WAIT": "3"}
    with (
        gateway_for(env, tmp_path, "--no-auth") as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        made = http.post("/v1/tools/create_invoice/calls", json={"input": INVOICE})
        ref = made.json()["operation_ref"]  # no worker runs: it stays pending
        # A heartbeat as a busy worker's (that never takes this call): the gateway holds
        # the wait instead of answering no_worker at once.
        engine = make_engine(f"sqlite:///{tmp_path / 'toolsafe.db'}")
        WorkerRegistry(engine).beat("busy@test", 1, ["toolsafe.execute"], now=utcnow())
        engine.dispose()
        held: list[httpx.Response] = []
        holder = threading.Thread(
            target=lambda: held.append(
                httpx.get(f"{server.url}/v1/calls/{ref}", params={"wait": 3}, timeout=10)
            )
        )
        holder.start()  # the gateway holds this one for 3 s
        try:
            deadline = time.monotonic() + 2.5
            while http.get("/healthz").json()["waits"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            refused = http.get(f"/v1/calls/{ref}", params={"wait": 1})
            assert refused.status_code == 429, refused.text
            assert refused.json()["code"] == "TOO_MANY_WAITS"
            assert refused.headers["Retry-After"] == "1"
            assert http.get(f"/v1/calls/{ref}").status_code == 200  # no wait: served
        finally:
            holder.join(10)
        assert held[0].status_code == 200 and held[0].json()["state"] == "pending"


def test_serve_refuses_what_it_must_not_do(tmp_path: Path) -> None:
    env = _bare_env()
    exposed = _toolsafe("serve", "--host", "0.0.0.0", "--no-auth", env=env, cwd=tmp_path)
    assert exposed.returncode == 2
    assert "--no-auth is allowed only on a loopback address" in exposed.stderr
    bad = _toolsafe("serve", env={**env, "TOOLSAFE_GATEWAY_MAX_WAIT": "soon"}, cwd=tmp_path)
    assert bad.returncode == 2 and "TOOLSAFE_GATEWAY_MAX_WAIT" in bad.stderr


@pytest.mark.redis
@pytest.mark.slow
def test_keys_from_the_cli_and_the_gateway_on_sqlite_with_workers(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    with cluster_for(pg_url, redis_url, tmp_path, suffix="serve", sqlite=True) as cluster:
        env = {**os.environ, **cluster.env}
        created = _toolsafe(
            "keys", "create", "--name", "cli-agent", "--scope", "agent", "--json",
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        shown = json.loads(created.stdout)
        token = shown["token"]
        assert shown["namespace"] == "cli-agent" and token.startswith("tsk_")
        engine = make_engine(cluster.env["TOOLSAFE_DATABASE_URL"])
        with engine.connect() as conn:
            row = conn.execute(select(api_keys)).one()
        engine.dispose()
        matched = TOKEN_PATTERN.match(token)
        assert matched is not None and matched[1] == row.key_id, token
        # the secret may hold "_" itself: the pattern, not a split, finds it
        assert matched[2] not in row.secret_hash and len(row.salt) == 32
        again = _toolsafe(
            "keys", "create", "--name", "cli-agent", "--scope", "agent", env=env, cwd=tmp_path
        )
        assert again.returncode == 1 and "KEY_EXISTS" in again.stderr

        cluster.start_worker("sqlite-gw", concurrency=1)
        with gateway_for(cluster.env, tmp_path) as server:
            with GatewayClient(server.url, token, timeout=30) as client:
                ref = new_ref("sqlite/gw")
                assert client.submit("create_invoice", INVOICE, ref).state is StepState.PENDING
                assert client.submit("create_invoice", INVOICE, ref).operation_ref == (
                    f"cli-agent/{ref}"
                )
                assert client.wait(ref, timeout=30).state is StepState.SUCCEEDED
            assert cluster.effects(f"cli-agent/{ref}") == 1

            listed = _toolsafe("keys", "list", "--json", env=env, cwd=tmp_path)
            assert [key["name"] for key in json.loads(listed.stdout)] == ["cli-agent"]
            assert "tsk_" not in listed.stdout
            revoked = _toolsafe("keys", "revoke", "cli-agent", env=env, cwd=tmp_path)
            assert revoked.returncode == 0, revoked.stderr
            # A verified key is trusted for CACHE_SECONDS, then its row is re-read.
            deadline = time.monotonic() + CACHE_SECONDS + 5
            with httpx.Client(base_url=server.url, headers=bearer(token), timeout=10) as http:
                while True:
                    answer = http.get("/v1/tools")
                    if answer.status_code != 200 or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
            assert answer.status_code == 401
            with GatewayClient(server.url, token) as client, pytest.raises(GatewayError):
                client.view(ref)
