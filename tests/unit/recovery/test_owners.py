"""Lease owners: named by host, pid, start time and pid namespace; "provably gone" only
when this host's process table proves it (a dead pid, a zombie, a reused pid)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from tests.conftest import IN_CI
from toolsafe.recovery import owners
from toolsafe.recovery.owners import LeaseOwner, process_info, provably_gone, this_process

# Without /proc these tests cannot run; in CI (Linux) that is a failure, never a skip.
NO_PROC = not os.path.exists("/proc/self/stat") and not IN_CI

linux = pytest.mark.skipif(NO_PROC, reason="needs /proc")


def test_an_owner_round_trips_through_its_column_value() -> None:
    me = this_process()
    assert LeaseOwner.parse(str(me)) == me
    assert str(me).startswith(me.prefix) and me.prefix == f"{me.host}:{me.pid}:"
    assert len(str(me)) <= 200  # the lease_owner column
    # A hostname with colons still parses: the fields are split from the right.
    odd = LeaseOwner("fe80::1", 7, "123", "abc.9")
    assert LeaseOwner.parse(str(odd)) == odd


@pytest.mark.parametrize("text", [None, "", "host:41", "worker-1", "h:x:1:s", "h:1::s"])
def test_names_that_are_not_precise_owners_do_not_parse(text: str | None) -> None:
    assert LeaseOwner.parse(text) is None
    assert provably_gone(text) is False


def test_a_running_process_is_not_gone() -> None:
    assert provably_gone(this_process()) is False
    assert provably_gone(str(this_process())) is False
    parent = os.getppid()
    info = process_info(parent)
    assert info is not None and info.running
    assert provably_gone(replace(this_process(), pid=parent, start=info.start)) is False


def test_an_exited_process_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    info = process_info(child.pid)
    assert info is not None
    started = info.start or "1"
    owner = replace(this_process(), pid=child.pid, start=started)
    child.wait()
    assert provably_gone(owner) is True


@linux
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


def test_a_reused_pid_is_not_taken_for_the_owner() -> None:
    """The pid runs, but a process started at another time: the owner is gone."""
    me = this_process()
    earlier = replace(me, start=str(int(me.start) - 1) if me.start.isdigit() else "0")
    assert provably_gone(earlier) is True
    # ...and a live process is never taken for a dead one just because its pid matches.
    assert provably_gone(me) is False


@linux
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


def test_another_host_or_namespace_is_never_provably_gone() -> None:
    me = this_process()
    gone_pid = 2**22 + 12345  # above any pid_max: no such process here
    assert provably_gone(replace(me, pid=gone_pid)) is True
    assert provably_gone(replace(me, pid=gone_pid, host=me.host + "-other")) is False
    assert provably_gone(replace(me, pid=gone_pid, space="other.1")) is False
    assert provably_gone(replace(me, pid=gone_pid, start="unknown")) is False


def test_a_process_this_host_cannot_read_is_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owners, "process_info", lambda pid: None)
    assert provably_gone(replace(this_process(), pid=2**22 + 1)) is False


def test_the_ps_fallback_reads_a_start_and_a_state() -> None:
    info = owners._from_ps(os.getpid())
    if info is None:
        assert not IN_CI, "CI needs ps (procps) for the owner check's fallback"
        pytest.skip("no ps on this machine")
    assert info.running and info.start
    assert owners._from_ps(2**22 + 12345) == owners.ProcessInfo(start="", running=False)


@pytest.mark.parametrize(
    ("text", "pid"),
    [("h:41:900:b.1", 41), ("host:41", 41), ("worker-1", None), (None, None), ("h:x", None)],
)
def test_the_pid_an_owner_names(text: str | None, pid: int | None) -> None:
    assert owners.owner_pid(text) == pid
