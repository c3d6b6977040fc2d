"""Every bad ``TOOLSAFE_*`` value stops a process before it does anything: one line on
stderr naming the variable and the form it needs, exit code 2. Here the worker
(``toolsafe worker`` and ``celery -A toolsafe worker``), beat and the demo as real
subprocesses; each variable through the CLI in-process in tests/unit/test_fail_fast.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROCESSES = {
    "toolsafe worker": (
        [sys.executable, "-m", "toolsafe", "worker", "--", "-P", "solo"],
        {"TOOLSAFE_EXAMPLE_TIMEOUT": "0"},
        "toolsafe: error: TOOLSAFE_EXAMPLE_TIMEOUT: must be",
    ),
    "celery -A toolsafe worker": (
        [sys.executable, "-m", "celery", "-A", "toolsafe", "worker", "-P", "solo"],
        {"TOOLSAFE_METRICS_PORT": "http"},
        "toolsafe: cannot start the worker: TOOLSAFE_METRICS_PORT: must be",
    ),
    "celery -A toolsafe beat": (
        [sys.executable, "-m", "celery", "-A", "toolsafe", "beat"],
        {"TOOLSAFE_LOG_FORMAT": "xml"},
        "toolsafe: cannot start beat: TOOLSAFE_LOG_FORMAT: must be",
    ),
    "toolsafe beat": (
        [sys.executable, "-m", "toolsafe", "beat"],
        {"TOOLSAFE_SWEEP_INTERVAL": "0"},
        "toolsafe: error: TOOLSAFE_SWEEP_INTERVAL: must be",
    ),
    "toolsafe demo": (
        [sys.executable, "-m", "toolsafe", "demo"],
        {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": "ftp://127.0.0.1:8900"},
        "toolsafe: error: TOOLSAFE_EXAMPLE_DOWNSTREAM_URL: must be",
    ),
    # Adapters that import but cannot register (the same module twice) are found by a
    # trial registration at start, not in worker_init where Celery swallows exceptions.
    "celery -A toolsafe worker, adapters that clash": (
        [sys.executable, "-m", "celery", "-A", "toolsafe", "worker", "-P", "solo"],
        {"TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples, toolsafe.adapters.examples"},
        "toolsafe: cannot start the worker: TOOLSAFE_ADAPTERS: must name adapter modules that "
        "register: tool 'create_invoice' is already registered",
    ),
}


def test_bad_values_stop_every_process_with_exit_code_2(tmp_path: Path) -> None:
    base = {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}
    base["TOOLSAFE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'toolsafe.db'}"
    # Nothing listens there: a process that got as far as the broker would hang, not exit.
    base["TOOLSAFE_BROKER_URL"] = "redis://127.0.0.1:1/0"
    started = {
        name: subprocess.Popen(
            argv,
            cwd=tmp_path,
            env={**base, **bad},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (argv, bad, _) in PROCESSES.items()
    }
    failures = []
    for name, process in started.items():
        try:
            out, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            failures.append(f"{name} did not stop:\n{err[-2000:]}")
            continue
        expected = PROCESSES[name][2]
        lines = [line for line in err.splitlines() if line.strip()]
        if process.returncode != 2 or len(lines) != 1 or not lines[0].startswith(expected):
            failures.append(f"{name}: exit {process.returncode}, stderr:\n{err[-2000:]}")
        elif out.strip():
            failures.append(f"{name} printed before it stopped:\n{out[-2000:]}")
    assert not failures, "\n\n".join(failures)
    assert not (tmp_path / "toolsafe.db").exists()
