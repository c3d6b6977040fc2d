"""Celery's processes as the harness starts them: ``celery worker`` (through ``toolsafe
worker`` or ``celery -A <app> worker``) and ``celery beat``, each a ``Process`` that
knows the line that says it is ready."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from toolsafe.harness.processes import Process, spawn

# What Celery logs (at INFO) once a worker consumes, and once beat schedules.
WORKER_READY: Final = " ready."
BEAT_READY: Final = "beat: Starting"


def toolsafe_command(*args: str) -> list[str]:
    """``toolsafe <args>`` run by this interpreter."""
    return [sys.executable, "-m", "toolsafe", *args]


def celery_command(app: str, *args: str) -> list[str]:
    """``celery -A <app> <args>`` run by this interpreter."""
    return [sys.executable, "-m", "celery", "-A", app, *args]


@dataclass(frozen=True)
class WorkerOptions:
    """How to run one worker.

    ``app`` None runs ``toolsafe worker`` (toolsafe's app on every toolsafe queue);
    otherwise ``celery -A <app> worker -Q <queues>`` (e.g. a benchmark's baseline app).
    ``pool="solo"`` makes the process that runs a call the one a SIGKILL hits.
    """

    name: str  # the log file's name, and the node name unless ``node`` is given
    app: str | None = None
    queues: Sequence[str] = ()
    pool: str = "prefork"
    concurrency: int | None = None
    loglevel: str = "INFO"
    without: Sequence[str] = ("mingle",)  # of "gossip", "mingle", "heartbeat"
    beat_schedule: Path | None = None  # run beat inside the worker (-B), schedule here
    node: str | None = None  # the node name before "@%h"

    def argv(self) -> list[str]:
        if self.app is None:
            if self.queues:
                raise ValueError("`toolsafe worker` consumes every toolsafe queue; pass app too")
            command = toolsafe_command("worker", "--")
        else:
            if not self.queues:
                raise ValueError(f"a worker of app {self.app!r} needs its queues")
            command = celery_command(self.app, "worker", "-Q", ",".join(self.queues))
        command += ["-P", self.pool, "-n", f"{self.node or self.name}@%h", "-l", self.loglevel]
        if self.concurrency is not None:
            command += ["-c", str(self.concurrency)]
        command += [f"--without-{feature}" for feature in self.without]
        if self.beat_schedule is not None:
            command += ["-B", "-s", str(self.beat_schedule)]
        return command


def start_worker(
    options: WorkerOptions,
    *,
    env: Mapping[str, str],
    directory: Path,
    cwd: Path | None = None,
) -> Process:
    """Start a worker (log ``directory/<name>.log``); ``wait_ready()`` waits until it
    consumes (its log level must be INFO or lower to say so)."""
    return spawn(
        options.name,
        options.argv(),
        env=env,
        directory=directory,
        cwd=cwd,
        ready_marker=WORKER_READY,
    )


def start_beat(
    *,
    env: Mapping[str, str],
    directory: Path,
    schedule: Path,
    name: str = "beat",
    app: str | None = None,
    loglevel: str = "INFO",
    cwd: Path | None = None,
) -> Process:
    """Start ``toolsafe beat`` (or ``celery -A <app> beat``), its schedule file at
    ``schedule``; ``wait_ready()`` waits until it schedules (log level INFO)."""
    args = ("beat", "-s", str(schedule), "-l", loglevel)
    argv = toolsafe_command(args[0], "--", *args[1:]) if app is None else celery_command(app, *args)
    return spawn(name, argv, env=env, directory=directory, cwd=cwd, ready_marker=BEAT_READY)
