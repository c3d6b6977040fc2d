"""Lease owners against real processes: an exited process and a zombie are gone, a reused
pid is told apart by its start time, and the ps fallback reads a start and a state."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from tests.conftest import missing, needs_proc
from toolsafe.recovery import owners
from toolsafe.recovery.owners import process_info, provably_gone, this_process


def test_an_exited_process_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    info = process_info(child.pid)
    assert info is not None
    started = info.start or "1"
    owner = replace(this_process(), pid=child.pid, start=started)
    child.wait()
    assert provably_gone(owner) is True


@needs_proc
def test_a_zombie_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    info = process_info(child.pid)
    assert info is not None
    owner = replace(this_process(), pid=child.pid, start=info.start)
    # Not reaped yet: the pid still exists, as a zombie that runs nothing.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    dead = process_info(child.pid)
    assert dead is not None and not dead.running
    assert provably_gone(owner) is True
    child.wait()


@needs_proc
def test_a_reused_pid_under_a_live_process_is_told_apart_by_its_start() -> None:
    """A real second process at the owner's pid: its start time differs from the owner's
    (a pid is only reused after the first process is gone), so the old owner is gone."""
    first = subprocess.Popen([sys.executable, "-c", "pass"])
    info = process_info(first.pid)
    assert info is not None
    owner = replace(this_process(), pid=first.pid, start=info.start)
    first.wait()
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Stand the second process in at the dead owner's pid, as the kernel would.
        reused = replace(owner, pid=second.pid)
        now = process_info(second.pid)
        assert now is not None and now.running
        assert provably_gone(replace(reused, start=now.start)) is False  # the new process
        if now.start != owner.start:
            assert provably_gone(reused) is True  # the old owner under the same pid
    finally:
        second.kill()
        second.wait()


def test_the_ps_fallback_reads_a_start_and_a_state() -> None:
    info = owners._from_ps(os.getpid())
    if info is None:
        missing("ps", "no ps (procps) on this machine for the owner check's fallback")
    assert info.running and info.start
    assert owners._from_ps(2**22 + 12345) == owners.ProcessInfo(start="", running=False)
