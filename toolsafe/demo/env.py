"""The demo's private installation: a temporary folder, its store, its broker, the
example downstream, real ``celery worker`` and ``celery beat`` subprocesses."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.harness import Process, WorkerOptions, start_beat, start_worker, stop_all
from toolsafe.recovery.db import migrate
from toolsafe.settings import Settings, child_environ, load_settings
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

    def start_workers(self, count: int, beat: bool = False) -> list[Process]:
        """Real worker processes (solo pool: the process that runs a call is the one a
        SIGKILL hits), started together, and beat with them when asked; returns once all
        are ready (``HarnessError`` if one is not)."""
        started = []
        if beat:
            self.beat = start_beat(
                env=self.env,
                directory=self.folder,
                schedule=self.folder / "beat-schedule",
                cwd=self.folder,
            )
        for _ in range(count):
            self._counter += 1
            options = WorkerOptions(name=f"worker{self._counter}", pool="solo", without=())
            worker = start_worker(options, env=self.env, directory=self.folder, cwd=self.folder)
            started.append(worker)
        self.workers.extend(started)
        for process in started:
            process.wait_ready(STARTUP_TIMEOUT)
        if self.beat is not None and beat:
            self.beat.wait_ready(STARTUP_TIMEOUT)
        return started

    def start_worker(self) -> Process:
        return self.start_workers(1)[0]

    def live_workers(self) -> list[Process]:
        return [worker for worker in self.workers if worker.alive()]

    def close(self) -> None:
        stop_all([*self.workers, *([self.beat] if self.beat else [])])
        self.downstream.stop()


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
    settings_env = {
        **DEMO_SETTINGS,
        "TOOLSAFE_BROKER_URL": broker_url,
        "TOOLSAFE_DATABASE_URL": database_url,
        "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream.url,
    }
    # The workers get exactly these settings; the in-process client (which validates
    # input with the same adapters) is given the same, read from this mapping.
    env = {**child_environ(settings_env), "PYTHONUNBUFFERED": "1"}
    try:
        client = Client.from_settings(load_settings(settings_env))
    except Exception:
        downstream.stop()
        raise
    return DemoEnv(folder, broker_url, database_url, downstream, env, client)


def _hide_password(url: str) -> str:
    """The URL with its password shown as ``***``, in the user part or in the query
    (libpq's ``?password=``, as a multi-host URL may carry it)."""
    url = re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
