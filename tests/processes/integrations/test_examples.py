"""Every example of docs/agents.md runs as written, against the folder's running cluster:
each example's ``main`` in this process (the SDKs are imported already, so this costs
little), and one as a program, ``python docs/examples/<name>.py --use-environment``, with
the cluster's ``TOOLSAFE_*`` settings. Each prints what its model received, and each call
wrote exactly once downstream."""

from __future__ import annotations

import asyncio
import inspect
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes.integrations.conftest import Processes
from tests.support.pipeline.harness import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
# example -> the operation_ref its one tool call gets
REFS = {
    "openai_agents_example.py": "openai:run_81:call_1",
    "pydantic_ai_example.py": "pydantic_ai:conv_81:c1-m1",
    "langgraph_example.py": "langgraph:thread_81:c1",
    "anthropic_example.py": "anthropic:conv_81:toolu_1",
}


def _model_saw_success(output: str, ref: str) -> bool:
    return ref in output and ('"ok":true' in output or '"ok": true' in output)


def test_every_example_is_tested() -> None:
    assert sorted(REFS) == sorted(path.name for path in EXAMPLES.glob("*_example.py"))


@pytest.mark.parametrize("name", sorted(REFS))
def test_each_example_runs_as_written(
    name: str,
    cluster: Cluster,
    processes: Processes,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    main = runpy.run_path(str(EXAMPLES / name))["main"]
    called = main(processes.local("examples"))
    if inspect.iscoroutine(called):
        asyncio.run(called)
    output = capsys.readouterr().out
    ref = REFS[name]
    assert _model_saw_success(output, ref), output
    assert cluster.effects(ref) == 1


def test_an_example_runs_as_a_program(cluster: Cluster) -> None:
    """The program around ``main``: the settings of a running toolsafe, and a replay (the
    in-process run above made the same call): the stored envelope, no second write."""
    name = "langgraph_example.py"
    env = {**os.environ, **cluster.env, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(EXAMPLES / name), "--use-environment"]
    done = subprocess.run(
        command, env=env, cwd=EXAMPLES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _model_saw_success(done.stdout, REFS[name]), done.stdout
    assert cluster.effects(REFS[name]) == 1
