"""The process harness itself, on real child processes (small Python programs) and the
session's real Redis db: readiness, early exits, stopping, SIGKILL of a whole process
group, respawns, waiting, the broker flush and the commands it builds."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support.machine import Machine
from toolsafe.harness import (
    Fleet,
    HarnessError,
    ProcessStartError,
    spawn,
    stop_all,
    wait_until,
)

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('up', flush=True)\ntime.sleep(60)\n"
)
# Starts a grandchild in the same process group, like a prefork worker's pool.
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print('grandchild', child.pid, flush=True)\ntime.sleep(60)\n"
)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    """No such process any more, or only its zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_a_child_is_ready_when_it_prints_its_marker_and_stops_on_sigterm(tmp_path: Path) -> None:
    child = spawn("sleeper", python(SLEEPER), env={}, directory=tmp_path, ready_marker="up")
    assert child.wait_ready(20) >= 0
    assert child.alive() and child.text() == "up\n"
    assert (tmp_path / "sleeper.log").read_text() == "up\n"
    assert child.stop() == -signal.SIGTERM
    assert not child.alive() and child.returncode == -signal.SIGTERM


def test_a_child_that_exits_before_it_is_ready_is_reported_with_its_last_words(
    tmp_path: Path,
) -> None:
    child = spawn(
        "broken",
        python("import sys\nprint('no adapters', flush=True)\nsys.exit(3)\n"),
        env={},
        directory=tmp_path,
        ready_marker=" ready.",
    )
    with pytest.raises(ProcessStartError, match=r"broken exited \(code 3\)") as raised:
        child.wait_ready(20)
    assert "no adapters" in str(raised.value)
    assert isinstance(raised.value, HarnessError)


def test_a_child_that_never_says_it_is_ready_times_out(tmp_path: Path, machine: Machine) -> None:
    with spawn("mute", python(SLEEPER), env={}, directory=tmp_path) as child:
        started = time.monotonic()
        silent = re.escape("mute did not print 'ready' within 0.3s")
        with pytest.raises(ProcessStartError, match=silent):
            child.wait_for_output("ready", 0.3)
        took = time.monotonic() - started
        assert took < machine.seconds(10), (took, machine.explain(10))
        assert child.alive()
    assert child.returncode == -signal.SIGKILL  # leaving the block SIGKILLed it


def test_stop_sigkills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    child = spawn("stubborn", python(STUBBORN), env={}, directory=tmp_path)
    child.wait_for_output("up", 20)
    assert child.stop(grace=0.5) == -signal.SIGKILL


def test_kill_reaches_the_whole_process_group(tmp_path: Path) -> None:
    child = spawn("parent", python(PARENT), env={}, directory=tmp_path)
    grandchild = int(child.wait_for_output("grandchild", 20).split()[1])
    assert not gone(grandchild)
    child.kill()
    assert child.returncode == -signal.SIGKILL
    wait_until(lambda: gone(grandchild), 10, "the grandchild to die with its group")


def test_stop_all_signals_every_child_before_waiting(tmp_path: Path) -> None:
    children = [spawn(f"c{n}", python(SLEEPER), env={}, directory=tmp_path) for n in range(3)]
    for child in children:
        child.wait_for_output("up", 20)
    stop_all(children, grace=20)
    assert [child.returncode for child in children] == [-signal.SIGTERM] * 3


def test_a_fleet_respawns_its_dead_children_into_the_same_log(tmp_path: Path) -> None:
    fleet = Fleet()
    victim = fleet.add(spawn("victim", python(SLEEPER), env={}, directory=tmp_path))
    other = fleet.add(spawn("other", python(SLEEPER), env={}, directory=tmp_path))
    victim.wait_for_output("up", 20)
    other.wait_for_output("up", 20)
    assert fleet.restart_dead() == 0
    victim.kill()
    assert fleet.live() == [other]
    assert fleet.restart_dead() == 1
    fresh = fleet.processes[0]
    assert fresh is not victim and fresh.name == "victim" and fresh.alive()
    fresh.wait_for_output("up", 20)
    assert fresh.text() == "up\n"  # only its own output...
    assert (tmp_path / "victim.log").read_text() == "up\nup\n"  # ...appended to the log
    assert fleet.exits == [-signal.SIGKILL] and fleet.killed() == 1
    fleet.stop(grace=20)
    assert fleet.live() == []
