"""Lease owners: named by host, pid, start time and pid namespace; "provably gone" only
when this host's process table proves it (a dead pid, a zombie, a reused pid)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from toolsafe.recovery import owners
from toolsafe.recovery.owners import LeaseOwner, process_info, provably_gone, this_process


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


def test_a_reused_pid_is_not_taken_for_the_owner() -> None:
    """The pid runs, but a process started at another time: the owner is gone."""
    me = this_process()
    earlier = replace(me, start=str(int(me.start) - 1) if me.start.isdigit() else "0")
    assert provably_gone(earlier) is True
    # ...and a live process is never taken for a dead one just because its pid matches.
    assert provably_gone(me) is False


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


@pytest.mark.parametrize(
    ("text", "pid"),
    [("h:41:900:b.1", 41), ("host:41", 41), ("worker-1", None), (None, None), ("h:x", None)],
)
def test_the_pid_an_owner_names(text: str | None, pid: int | None) -> None:
    assert owners.owner_pid(text) == pid
