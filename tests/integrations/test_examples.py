"""Every example of docs/agents.md runs as written (``python docs/examples/<name>.py``),
here against the folder's running cluster (``--use-environment`` with its ``TOOLSAFE_*``
settings) instead of an embedded toolsafe of its own, all four at once: each prints what
its model received, and each call wrote exactly once downstream."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline.harness import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
# example -> the operation_ref its one tool call gets
REFS = {
    "openai_agents_example.py": "openai:run_81:call_1",
    "pydantic_ai_example.py": "pydantic_ai:conv_81:c1-m1",
    "langgraph_example.py": "langgraph:thread_81:c1",
    "anthropic_example.py": "anthropic:conv_81:toolu_1",
}


def _start(name: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, str(EXAMPLES / name), "--use-environment"]
    return subprocess.Popen(
        command, env=env, cwd=EXAMPLES, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def test_each_example_runs_as_written(cluster: Cluster) -> None:
    env = {**os.environ, **cluster.env, "PYTHONUNBUFFERED": "1"}
    running = {name: _start(name, env) for name in REFS}
    for name, process in running.items():
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"{name}:\n{output}"
        ref = REFS[name]
        assert ref in output and ('"ok":true' in output or '"ok": true' in output), output
        assert cluster.effects(ref) == 1, name
    assert sorted(REFS) == sorted(p.name for p in EXAMPLES.glob("*_example.py"))
