"""Children of the preloaded interpreter (toolsafe/harness/preload.py, on for the whole
suite) behave as the new interpreters they stand in for: the command's exit code and
output, the child's own environment and folder, a process group of its own that a
SIGKILL ends with -9, one exit status however many threads ask for it; and a child whose
interpreter-level environment differs is started as a new interpreter. A program run
this way may serve its own children from the same preloaded interpreter."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from toolsafe.harness import preload, spawn
from toolsafe.harness.errors import ProcessStartError

ROOT = Path(__file__).resolve().parents[3]


def test_the_suite_runs_with_the_preloaded_interpreter() -> None:
    assert preload.enabled()


def test_exit_codes_and_output_are_the_commands() -> None:
    env = {**os.environ, "TOOLSAFE_DATABASE_URL": "sqlite:///nowhere/at/all.db"}
    version = preload.run([sys.executable, "-m", "toolsafe", "--version"], env=env, timeout=60)
    assert (version.returncode, version.stderr) == (0, "")
    assert version.stdout.startswith("toolsafe ")
    usage = preload.run(
        [sys.executable, "-m", "toolsafe", "steps", "list", "--limit", "0"], env=env, timeout=60
    )
    assert usage.returncode == 2 and usage.stdout == ""
    assert "0 is not between 1 and 10000" in usage.stderr


def test_the_child_has_its_own_environment_and_folder(tmp_path: Path) -> None:
    # A relative SQLite URL: the store lands in the child's folder, named by its setting.
    env = {**os.environ, "TOOLSAFE_DATABASE_URL": "sqlite:///only-here.db"}
    assert "TOOLSAFE_DATABASE_URL" not in os.environ
    argv = [sys.executable, "-m", "toolsafe", "migrate"]
    assert preload.eligible(argv, env)
    done = preload.run(argv, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "only-here.db").is_file()
    assert not (ROOT / "only-here.db").exists()


def test_a_sigkilled_child_reports_minus_9_to_every_thread(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "toolsafe.adapters.examples.downstream", "--port", "0"]
    assert preload.eligible(argv, dict(os.environ))
    child = spawn("downstream", argv, env=dict(os.environ), directory=tmp_path, cwd=ROOT)
    assert isinstance(child.popen, preload.Preloaded)
    child.wait_for_output("http://127.0.0.1:", timeout=60)
    assert os.getpgid(child.pid) == child.pid and child.alive()
    codes: list[int] = []
    waiters = [threading.Thread(target=lambda: codes.append(child.popen.wait(30))) for _ in "abc"]
    for waiter in waiters:
        waiter.start()
    os.killpg(child.pid, signal.SIGKILL)
    for waiter in waiters:
        waiter.join(60)
    assert codes == [-signal.SIGKILL] * 3
    assert child.returncode == -signal.SIGKILL and not child.alive()


def test_a_child_that_fails_to_start_says_so(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "toolsafe.no_such_module"]
    child = spawn("missing", argv, env=dict(os.environ), directory=tmp_path, cwd=ROOT)
    try:
        child.wait_for_output("never printed", timeout=60)
    except ProcessStartError as error:
        assert "toolsafe.no_such_module" in str(error)
    else:  # pragma: no cover - the assertion's message
        raise AssertionError("a missing module started")
    assert child.returncode == 1


def test_interpreter_level_environment_starts_a_new_interpreter() -> None:
    argv = [sys.executable, "-m", "toolsafe", "--version"]
    env = dict(os.environ)
    assert preload.eligible(argv, env)
    assert preload.eligible(argv, {**env, "PYTHONUNBUFFERED": "1"})  # set up by the child
    for name, value in (
        ("PYTHONPATH", "/elsewhere"), ("LD_PRELOAD", "libfaketime.so.1"),
        ("FAKETIME", "+30s"), ("COVERAGE_PROCESS_START", ".coveragerc"), ("TZ", "Asia/Tokyo"),
    ):  # fmt: skip
        assert not preload.eligible(argv, {**env, name: value}), name
    assert not preload.eligible([sys.executable, "-c", "pass"], env)
    assert not preload.eligible(["python3", "-m", "toolsafe"], env)
    assert not preload.eligible([sys.executable, "-m", "toolsafely"], env)


# A program that starts one harness child and says how it was started, and by whom.
# Guarded as any program whose children come from multiprocessing: they import it.
PROGRAM = """
import multiprocessing.forkserver
import os
import sys
from pathlib import Path

from toolsafe.harness import preload, spawn

if __name__ == "__main__":
    child = spawn(
        "version", [sys.executable, "-m", "toolsafe", "--version"], env=dict(os.environ),
        directory=Path.cwd(),
    )
    print("code", child.popen.wait(60), "preloaded", isinstance(child.popen, preload.Preloaded))
    print("server", multiprocessing.forkserver._forkserver._forkserver_pid)
    print(child.text().strip())
"""


def test_a_preloaded_program_serves_its_children_from_the_same_interpreter(
    tmp_path: Path,
) -> None:
    (tmp_path / "starts_one.py").write_text(PROGRAM)
    argv = [sys.executable, "-m", "starts_one"]
    env = dict(os.environ)
    assert not preload.eligible(argv, env) and preload.eligible(argv, env, ("starts_one",))
    plain = preload.run(argv, env=env, cwd=tmp_path, timeout=60, modules=("starts_one",))
    assert plain.returncode == 0, plain.stderr
    assert "code 0 preloaded False" in plain.stdout and "toolsafe " in plain.stdout
    served = preload.run(
        argv, env=env, cwd=tmp_path, timeout=60, modules=("starts_one",), preload_children=True
    )
    assert served.returncode == 0, served.stderr
    assert "code 0 preloaded True" in served.stdout and "toolsafe " in served.stdout
    # Forked by the suite's server: the program started no server of its own.
    assert "server None" in served.stdout
