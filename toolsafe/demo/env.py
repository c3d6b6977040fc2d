"""The demo's private installation: a temporary folder, its store, its broker, the
example downstream, real ``celery worker`` and ``celery beat`` subprocesses."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.recovery.db import migrate
from toolsafe.settings import Settings
from toolsafe.tasks.client import Client

# Short times so that every scenario ends in seconds. The call timeout stays under the
# task's soft limit, and the lease outlives the hard limit (settings refuse otherwise).
DEMO_SETTINGS: Final = {
    "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
    "TOOLSAFE_EXAMPLE_TIMEOUT": "1.5",
    "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "1",
    "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "4",
    "TOOLSAFE_TASK_TIME_LIMIT": "4.5",
    "TOOLSAFE_LEASE_SECONDS": "5",
    "TOOLSAFE_SWEEP_INTERVAL": "0.5",
    "TOOLSAFE_REPUBLISH_AFTER": "2",
    "TOOLSAFE_RETRY_BASE_DELAY": "0.2",
    "TOOLSAFE_RETRY_MAX_DELAY": "1",
    "TOOLSAFE_VERIFY_BASE_DELAY": "0.2",
    "TOOLSAFE_VERIFY_MAX_DELAY": "0.5",
    "TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE": "3",
    # The lookup-down scenario escalates within seconds (the default budget is minutes).
    "TOOLSAFE_VERIFY_BUDGET": "2",
    "TOOLSAFE_FAULTS_ENABLED": "0",
}
STARTUP_TIMEOUT: Final = 30.0


class DemoError(Exception):
    """The demo's own machinery failed (not a scenario): a process did not start."""


@dataclass
class Process:
    """A subprocess the demo started, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: TextIO

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Warm shutdown (SIGTERM), SIGKILL if it does not go."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        self.log.close()

    def tail(self, lines: int = 20) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class DemoEnv:
    """Everything the scenarios run against; ``close()`` stops what was started."""

    folder: Path
    broker_url: str
    database_url: str
    downstream: DownstreamService
    env: dict[str, str]
    client: Client
    workers: list[Process] = field(default_factory=list)
    beat: Process | None = None
    _counter: int = 0

    @property
    def settings(self) -> Settings:
        return self.client.runtime.settings

    def _spawn(self, name: str, argv: list[str]) -> Process:
        log_path = self.folder / f"{name}.log"
        log = log_path.open("w", encoding="utf-8")
        popen = subprocess.Popen(
            [sys.executable, "-m", "toolsafe", *argv],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.folder,
        )
        return Process(name, popen, log_path, log)

    def start_workers(self, count: int, beat: bool = False) -> list[Process]:
        """Real worker processes (solo pool: the process that runs a call is the one a
        SIGKILL hits), started together, and beat with them when asked; returns once all
        are ready."""
        started = []
        if beat:
            schedule = str(self.folder / "beat-schedule")
            self.beat = self._spawn(
                "beat", ["beat", "--", "--schedule", schedule, "--loglevel", "INFO"]
            )
        for _ in range(count):
            self._counter += 1
            name = f"worker{self._counter}"
            argv = ["worker", "--", "--pool", "solo", "-n", f"{name}@%h", "--loglevel", "INFO"]
            started.append(self._spawn(name, argv))
        self.workers.extend(started)
        for process in started:
            _wait_for_line(process, " ready.", STARTUP_TIMEOUT)
        if beat and self.beat is not None:
            _wait_for_line(self.beat, "beat: Starting", STARTUP_TIMEOUT)
        return started

    def start_worker(self) -> Process:
        return self.start_workers(1)[0]

    def live_workers(self) -> list[Process]:
        return [worker for worker in self.workers if worker.alive()]

    def close(self) -> None:
        processes = [*self.workers, *([self.beat] if self.beat else [])]
        for process in processes:  # signal all first: they shut down in parallel
            if process.alive():
                process.popen.send_signal(signal.SIGTERM)
        for process in processes:
            process.stop()
        self.downstream.stop()


def _wait_for_line(process: Process, needle: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.log.flush()
        if needle in process.log_path.read_text(encoding="utf-8", errors="replace"):
            return
        if not process.alive():
            raise DemoError(f"{process.name} exited early:\n{process.tail()}")
        time.sleep(0.05)
    raise DemoError(f"{process.name} was not ready after {timeout:g}s:\n{process.tail()}")


def make_folder() -> Path:
    """A new private folder (mode 0700) for the store, the broker and the logs."""
    return Path(tempfile.mkdtemp(prefix="toolsafe-demo-"))


def remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def open_env(
    folder: Path,
    broker_url: str | None,
    database_url: str | None,
    say: Callable[[str], None],
) -> DemoEnv:
    """Migrate the store, start the downstream (naive: duplicates would show), and
    build the client; workers and beat are started by the caller."""
    if broker_url is None:
        for part in ("queue", "control", "processed"):
            (folder / "broker" / part).mkdir(parents=True, exist_ok=True)
        broker_url = f"filesystem://{folder}/broker"
    if database_url is None:
        database_url = f"sqlite:///{folder}/toolsafe.db"
    migrate(database_url)
    say(f"store     {_hide_password(database_url)} (migrated)")
    say(f"broker    {_hide_password(broker_url)}")
    downstream = DownstreamService(naive=True).start()
    say(f"downstream {downstream.url} (naive mode: it would store every duplicate)")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOOLSAFE_")},
        **DEMO_SETTINGS,
        "TOOLSAFE_BROKER_URL": broker_url,
        "TOOLSAFE_DATABASE_URL": database_url,
        "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream.url,
        "PYTHONUNBUFFERED": "1",
    }
    # The client validates input with the same adapters, which read their settings from
    # this process's environment.
    os.environ.update({k: v for k, v in env.items() if k.startswith("TOOLSAFE_EXAMPLE_")})
    try:
        client = Client.from_settings(Settings.from_env(env))
    except Exception:
        downstream.stop()
        raise
    return DemoEnv(folder, broker_url, database_url, downstream, env, client)


def _hide_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
