"""The TypeScript client (``clients/typescript``, ``@toolsafe/client``) and its Vercel
AI SDK tools against a real ``toolsafe serve`` on PostgreSQL and Redis with real workers
and the example downstream: npm installs the pinned packages here, the committed
OpenAPI types must equal those generated from the schema this gateway serves, ``tsc``
type-checks and builds the package, and ``node --test`` runs its tests (the AI SDK's
mock model driving tool calls, a crash and replay, an approval, a denial, a corrected
input, a step still in progress). The downstream's effects are counted here: one per
call, none for the denial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.gateway.harness import ROOT, GatewayServer, gateway_for, make_key
from tests.support.pipeline.harness import Cluster, cluster_for
from toolsafe.agents.ai_sdk import ai_sdk_ref
from toolsafe.agents.shared import InProgress

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

PACKAGE = ROOT / "clients" / "typescript"
NAMESPACE = "ts-team"
NODE_TESTS = ("refs", "gateway", "ai-sdk")
PASSED = 12  # the tests in clients/typescript/test/*.test.ts
# Scopes and calls the two implementations of the ref rule must agree on.
REF_CASES = (
    ("run_81", "call_abc123", None),
    ("conv-9", "toolu_01A", "acme"),
    ("thread/with spaces:and colons", "call_1", None),
    ("x" * 300, "call_" + "y" * 60, "ns.with:dots"),
    ("...", "---", None),
    ("élan vital ✓", "調用-1", "acme"),
    ("_lead", "-dash", None),
)


@dataclass
class Setup:
    cluster: Cluster
    server: GatewayServer
    agent: str
    operator: str


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory: Path = tmp_path_factory.mktemp("ts-client")
    with cluster_for(pg_url, redis_url, directory, suffix="tsclient") as cluster:
        database = cluster.env["TOOLSAFE_DATABASE_URL"]
        agent = make_key(database, "ts-agent", "agent", NAMESPACE)
        ops = make_key(database, "ts-ops", "operator")
        cluster.start_worker("tsclient", concurrency=2)
        with gateway_for(cluster.env, directory) as server:
            yield Setup(cluster, server, agent, ops)


def _node_or_fail() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node (20 or later) and npm are needed for the TypeScript client's test")
    return node, npm


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    ran = subprocess.run(
        command, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert ran.returncode == 0, f"{command}:\n{ran.stdout[-6000:]}\n{ran.stderr[-3000:]}"
    return ran.stdout


def test_the_typescript_client_and_its_ai_sdk_tools(setup: Setup, tmp_path: Path) -> None:
    node, npm = _node_or_fail()
    _run([npm, "install", "--no-package-lock", "--no-audit", "--no-fund",
          "--loglevel=error", "--ignore-scripts"], timeout=240)  # fmt: skip
    bin_ = PACKAGE / "node_modules" / ".bin"

    # The committed types are those of the schema this gateway serves.
    schema = httpx.get(f"{setup.server.url}/openapi.json", timeout=10)
    schema.raise_for_status()
    (tmp_path / "openapi.json").write_bytes(schema.content)
    _run([str(bin_ / "openapi-typescript"), str(tmp_path / "openapi.json"),
          "-o", str(tmp_path / "openapi.d.ts")], timeout=60)  # fmt: skip
    generated = (tmp_path / "openapi.d.ts").read_text(encoding="utf-8")
    committed = (PACKAGE / "src" / "openapi.d.ts").read_text(encoding="utf-8")
    assert generated == committed, (
        "clients/typescript/src/openapi.d.ts differs from the types of the gateway's "
        "/openapi.json: regenerate it (`npm run generate` in clients/typescript with "
        "TOOLSAFE_OPENAPI naming a running gateway's /openapi.json) and commit it"
    )

    # Type-checked (strict) and built: the package, its tests and the docs' examples.
    _run([str(bin_ / "tsc"), "-p", "tsconfig.json"], timeout=120)

    run = f"ts-{uuid.uuid4().hex[:8]}"
    for call, scope in (("call_appr", f"{run}-appr"), ("call_deny", f"{run}-deny")):
        ref = ai_sdk_ref(call, scope, NAMESPACE)
        setup.cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    slow = ai_sdk_ref("call_slow", f"{run}-slow", NAMESPACE)
    setup.cluster.fault(fault="rate_limit", operation_ref=slow, times=1)
    cases = [[s, c, n, ai_sdk_ref(c, s, n)] for s, c, n in REF_CASES]
    env = {
        **os.environ,
        "TOOLSAFE_URL": setup.server.url,
        "TOOLSAFE_AGENT_KEY": setup.agent,
        "TOOLSAFE_OPERATOR_KEY": setup.operator,
        "TOOLSAFE_NAMESPACE": NAMESPACE,
        "TOOLSAFE_RUN": run,
        "TOOLSAFE_REF_CASES": json.dumps(cases),
        "TOOLSAFE_IN_PROGRESS_FIELDS": json.dumps(list(InProgress.model_fields)),
    }
    files = [f"dist/test/{name}.test.js" for name in NODE_TESTS]
    out = _run([node, "--test", *files], timeout=180, env=env)
    summary = {
        line.split()[1]: int(line.split()[2])
        for line in out.splitlines()
        if line.startswith("# ") and len(line.split()) == 3 and line.split()[2].isdigit()
    }
    assert (summary.get("pass"), summary.get("fail"), summary.get("skipped")) == (PASSED, 0, 0), (
        out[-4000:]
    )

    expected = {
        ("call_1", "client"): 1,
        ("call_sse", "sse"): 1,
        ("call_bad", "problems"): 1,  # the invalid input wrote nothing; the valid one once
        ("call_bill", "bill"): 1,
        ("call_crash", "crash"): 1,  # the crashed agent and its replays: one write
        ("call_appr", "appr"): 1,
        ("call_deny", "deny"): 0,
        ("call_em1", "input"): 1,  # the corrected input, under the first call's ref
        ("call_em2", "input"): 0,
        ("call_slow", "slow"): 1,  # rate-limited first, retried by toolsafe alone
    }
    effects = {
        key: setup.cluster.effects(ai_sdk_ref(key[0], f"{run}-{key[1]}", NAMESPACE))
        for key in expected
    }
    assert effects == expected, setup.cluster.logs()
    violations = setup.cluster.violations(
        ai_sdk_ref(call, f"{run}-{scope}", NAMESPACE)
        for call, scope in (("call_crash", "crash"), ("call_appr", "appr"))
    )
    assert violations == []
