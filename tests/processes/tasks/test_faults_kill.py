"""The kill faults against real processes: fired once across processes, and mid-call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.tasks.test_faults import make
from toolsafe.tasks.faults import (
    Faults,
)


def test_kill_sigkills_the_process_once_across_processes(tmp_path: Path) -> None:
    faults = make(tmp_path, {"op_1": {"after_claim": "kill"}})
    code = (
        "import sys; from toolsafe.tasks.faults import Faults; "
        "Faults(True, sys.argv[1], sys.argv[2]).hit('after_claim', 'op_1')"
    )
    outcomes = [
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "plan.json"), str(faults.state_dir)],
            timeout=60,
            check=False,
        ).returncode
        for _ in range(2)
    ]
    assert outcomes == [-signal.SIGKILL, 0]


def test_during_call_kill_fires_mid_call(tmp_path: Path) -> None:
    make(tmp_path, {"op_1": {"during_call": {"action": "kill", "delay": 0.05}}})
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        child = Faults(True, str(tmp_path / "plan.json"), str(tmp_path / "fired"))
        with child.during("during_call", "op_1"):
            time.sleep(5)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
