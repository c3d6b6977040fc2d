"""Lease owners named precisely enough to tell, on their own host, that they are gone:
host, process id, the process's start time (so a reused pid is another process) and the
pid namespace the pid belongs to (so two containers sharing a hostname never mix up)."""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

PROC: Final = Path("/proc")
# A stat line's fields after the ``(comm)`` field: state is the 1st, starttime the 20th.
_STATE_FIELD: Final = 0
_STARTTIME_FIELD: Final = 19
# A zombie or a dead entry runs nothing: its call cannot send anything any more.
_DEAD_STATES: Final = frozenset({"Z", "X", "x"})


@dataclass(frozen=True)
class ProcessInfo:
    """What this host says about a pid: its start time and whether it still runs."""

    start: str
    running: bool


@dataclass(frozen=True)
class LeaseOwner:
    """``host:pid:start:space`` — the lease owner column's value (at most 200 chars)."""

    host: str
    pid: int
    start: str  # the process's start (``/proc/<pid>/stat`` field 22, or ``ps -o lstart``)
    space: str  # the pid namespace on Linux ("" where pids are not namespaced)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.space}"

    @property
    def prefix(self) -> str:
        """What every owner with this host and pid starts with (``host:pid:``)."""
        return f"{self.host}:{self.pid}:"

    @classmethod
    def parse(cls, text: str | None) -> LeaseOwner | None:
        """The owner a lease names; None for anything else (an older ``host:pid`` owner,
        a hand-written name): such an owner is never "provably gone", only expired."""
        if not text:
            return None
        parts = text.rsplit(":", 3)
        if len(parts) != 4 or not parts[0] or not parts[1].isdigit() or not parts[2]:
            return None
        host, pid, start, space = parts
        return cls(host=host, pid=int(pid), start=start, space=space)


def owner_pid(text: object) -> int | None:
    """The process id a lease owner names: ``host:pid:start:space``, or the older
    ``host:pid``; None for a name that carries none."""
    if not isinstance(text, str):
        return None
    parsed = LeaseOwner.parse(text)
    if parsed is not None:
        return parsed.pid
    last = text.rsplit(":", 1)[-1]
    return int(last) if ":" in text and last.isdigit() else None


def hostname() -> str:
    return socket.gethostname()


@cache
def pid_space() -> str:
    """This process's pid namespace and boot, or "" where /proc does not tell.

    The same pid on two kernels or in two namespaces is two processes: only an owner of
    this very namespace can be checked through this host's process table.
    """
    try:
        boot = (PROC / "sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
        namespace = os.stat(PROC / "self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}.{namespace}"


def _from_proc(pid: int) -> ProcessInfo | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return ProcessInfo(start="", running=False)
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) <= _STARTTIME_FIELD:
        return None
    return ProcessInfo(
        start=fields[_STARTTIME_FIELD], running=fields[_STATE_FIELD] not in _DEAD_STATES
    )


def _from_ps(pid: int) -> ProcessInfo | None:
    """Where there is no /proc (macOS, the BSDs): ``ps`` tells the start to the second."""
    try:
        shown = subprocess.run(
            ["ps", "-o", "lstart=,stat=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = shown.stdout.strip()
    if shown.returncode != 0 or not text:
        return ProcessInfo(start="", running=False) if shown.returncode == 1 else None
    *start, state = text.split()
    return ProcessInfo(
        start="-".join(start).replace(":", "."), running=state[:1] not in _DEAD_STATES
    )


def process_info(pid: int) -> ProcessInfo | None:
    """The start and liveness of ``pid`` on this host; None when nothing can tell."""
    if PROC.joinpath("self/stat").exists():
        return _from_proc(pid)
    return _from_ps(pid)


_this: dict[int, LeaseOwner] = {}


def this_process() -> LeaseOwner:
    """The owner name of the calling process (computed once per process)."""
    pid = os.getpid()
    owner = _this.get(pid)
    if owner is None:
        info = process_info(pid)
        start = info.start if info is not None and info.start else "unknown"
        owner = _this[pid] = LeaseOwner(hostname(), pid, start, pid_space())
    return owner


def provably_gone(owner: LeaseOwner | str | None) -> bool:
    """True only when this host can prove the owner runs no more: its pid is not running
    (or a zombie), or runs a process that started at another time (a reused pid).

    An owner on another host, in another pid namespace, with an unknown start time, or
    that this host cannot check is never "provably gone": only its lease's expiry is.
    """
    parsed = LeaseOwner.parse(owner) if isinstance(owner, str) or owner is None else owner
    if parsed is None or parsed.start == "unknown":
        return False
    me = this_process()
    if parsed.host != me.host or parsed.space != me.space:
        return False
    if parsed == me:
        return False
    info = process_info(parsed.pid)
    if info is None:
        return False
    return not info.running or info.start != parsed.start
