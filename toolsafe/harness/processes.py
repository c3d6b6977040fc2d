"""Child processes: each in a process group of its own with its output in a log file;
start, wait until it says it is ready, stop (SIGTERM, then SIGKILL), SIGKILL, respawn,
read its log; and a fleet of them that restarts the ones found dead."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from toolsafe.harness import preload
from toolsafe.harness.errors import ProcessStartError
from toolsafe.settings import child_environ


def child_env(settings: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child's environment: ``base`` (default: this process's, as the settings room
    reads it) without its ``TOOLSAFE_*`` variables, so that none leaks in from the
    caller's shell, then ``settings``."""
    if base is None:
        return child_environ(settings)
    env = {key: value for key, value in base.items() if not key.startswith("TOOLSAFE_")}
    env.update(settings)
    return env


class Process:
    """One running child, started by the constructor (or ``spawn``): a new interpreter,
    or a fork of the preloaded one when ``harness.preload`` is enabled (the tests).

    The child leads a process group of its own, so ``kill()`` reaches a prefork worker's
    pool children too and a Ctrl-C at the terminal reaches only the parent, which stops
    its children itself. Output (stdout and stderr) is appended to ``log_path``;
    ``text()`` returns what this child wrote, even when a respawned one shares the file.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        cwd: Path | None = None,
        ready_marker: str | None = None,
        preload_children: bool = False,
    ) -> None:
        """``preload_children``: a preloaded child serves its own harness children from
        the same preloaded interpreter (``preload.Preloaded``)."""
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.ready_marker = ready_marker
        self._offset = log_path.stat().st_size if log_path.exists() else 0
        self.popen: subprocess.Popen[bytes] | preload.Preloaded
        if preload.eligible(self.argv, self.env):
            self.popen = preload.Preloaded(
                self.argv, env=self.env, cwd=cwd, log_path=log_path,
                preload_children=preload_children,
            )  # fmt: skip
        else:
            with log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
                self.popen = subprocess.Popen(
                    self.argv,
                    env=self.env,
                    cwd=cwd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        self.started = time.monotonic()

    def __repr__(self) -> str:
        return f"<Process {self.name} pid {self.pid} {'alive' if self.alive() else 'exited'}>"

    # ------------------------------------------------------------------ state

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once the child has exited (negative: killed by that signal)."""
        return self.popen.poll()

    # ------------------------------------------------------------------ output

    def text(self) -> str:
        """Everything this child has written so far."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._offset)
                return log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def wait_for_output(self, marker: str, timeout: float, interval: float = 0.02) -> str:
        """The first line of output containing ``marker``, once it is written;
        ``ProcessStartError`` (with the log's tail) if the child exits or ``timeout``
        seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            exited = not self.alive()  # read after the check: the last words count too
            for line in self.text().splitlines():
                if marker in line:
                    return line
            if exited:
                raise ProcessStartError(
                    f"{self.name} exited (code {self.returncode}) before it printed "
                    f"{marker!r}:\n{self.tail()}"
                )
            if time.monotonic() >= deadline:
                raise ProcessStartError(
                    f"{self.name} did not print {marker!r} within {timeout:g}s:\n{self.tail()}"
                )
            time.sleep(interval)

    def wait_ready(self, timeout: float = 90.0) -> float:
        """Wait for the child's ready marker; the seconds from its start until then."""
        if self.ready_marker is None:
            raise ValueError(f"{self.name} has no ready marker to wait for")
        self.wait_for_output(self.ready_marker, timeout)
        return time.monotonic() - self.started

    # ------------------------------------------------------------------ ending

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM to the main process); returns at once."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 10.0) -> int:
        """Warm shutdown; SIGKILL the whole group if it has not exited after ``grace``
        seconds. Returns the exit code."""
        self.terminate()
        try:
            return self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.popen.wait()

    def kill(self) -> None:
        """SIGKILL the whole group (the main process and a prefork pool's children) and
        reap the main process."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)

    def respawn(self) -> Process:
        """A fresh child with the same command, environment and log (appended to)."""
        return Process(
            self.name,
            self.argv,
            env=self.env,
            log_path=self.log_path,
            cwd=self.cwd,
            ready_marker=self.ready_marker,
        )

    def __enter__(self) -> Process:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Leaving a ``with`` block SIGKILLs the child: tests and benchmarks need no
        graceful drain, a redelivered or lost hint being harmless (R1)."""
        self.kill()

    # ------------------------------------------------------------------ measuring

    def cpu_seconds(self) -> float:
        """User + system CPU of the live processes of the child's group (Linux /proc)."""
        return group_cpu_seconds(self.pid)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    directory: Path,
    cwd: Path | None = None,
    ready_marker: str | None = None,
    preload_children: bool = False,
) -> Process:
    """Start ``argv`` as ``name``, its output in ``directory/<name>.log``."""
    return Process(
        name,
        argv,
        env=env,
        log_path=directory / f"{name}.log",
        cwd=cwd,
        ready_marker=ready_marker,
        preload_children=preload_children,
    )


def stop_all(processes: Iterable[Process], grace: float = 10.0) -> None:
    """Warm shutdown of several children at once: all are signalled first, so they shut
    down in parallel; those still alive after ``grace`` seconds are SIGKILLed."""
    children = list(processes)
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()


class Fleet:
    """The children of one run, with the exit codes of the ones that died; the chaos run
    keeps its workers alive with ``restart_dead``."""

    def __init__(self) -> None:
        self.processes: list[Process] = []
        self.exits: list[int] = []

    def add(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def live(self) -> list[Process]:
        return [process for process in self.processes if process.alive()]

    def restart_dead(self) -> int:
        """Respawn (in place) every child that exited; returns how many."""
        restarted = 0
        for index, process in enumerate(self.processes):
            code = process.returncode
            if code is None:
                continue
            self.exits.append(code)
            self.processes[index] = process.respawn()
            restarted += 1
        return restarted

    def killed(self) -> int:
        """How many of the recorded exits were SIGKILLs."""
        return sum(1 for code in self.exits if code == -signal.SIGKILL)

    def stop(self, grace: float = 10.0) -> None:
        stop_all(self.processes, grace)

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


# ---------------------------------------------------------------------- CPU (Linux)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _cpu(fields: list[str]) -> float:
    # utime and stime are the 12th and 13th fields after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 when it is gone)."""
    fields = _stat(pid)
    return _cpu(fields) if fields is not None else 0.0


def group_cpu_seconds(group: int) -> float:
    """User + system CPU of the live processes of a process group."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None and int(fields[2]) == group:
            total += _cpu(fields)
    return total
