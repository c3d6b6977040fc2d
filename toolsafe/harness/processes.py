"""The chaos run's processes and infrastructure faults: the example downstream, real
``celery worker`` processes restarted when they die, beat, broker flushes and
PostgreSQL connection kills."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx

# Keys a Redis "flush" leaves alone (e.g. the test suite's lock on its db number).
BROKER_KEEP_DEFAULT: tuple[str, ...] = ()


class ChaosSetupError(RuntimeError):
    """The chaos run cannot start: a bad option or a service that does not answer."""


def redis_db(url: str) -> int:
    """The db number of a ``redis://host:port/N`` URL (0 when absent)."""
    path = urlsplit(url).path.strip("/")
    return int(path) if path else 0


def check_broker(url: str) -> None:
    """Only a dedicated Redis db other than 0: the run deletes its keys."""
    if urlsplit(url).scheme not in ("redis", "rediss"):
        raise ChaosSetupError(f"--broker must be a redis:// URL, got {urlsplit(url).scheme}://")
    try:
        number = redis_db(url)
    except ValueError:
        raise ChaosSetupError(f"--broker {url!r} names no db number") from None
    if number == 0:
        raise ChaosSetupError(
            "--broker must name a dedicated Redis db other than 0 (e.g. redis://host:6379/9): "
            "the chaos run deletes every key in it"
        )


def flush_broker(url: str, keep: Sequence[str] = BROKER_KEEP_DEFAULT) -> int:
    """Delete every key of the broker's db (queues, unacked messages, held ETAs) but
    ``keep``: what a Redis restart without persistence does. Returns keys deleted."""
    import redis

    check_broker(url)
    client = redis.Redis.from_url(url)
    kept = {key.encode() for key in keep}
    deleted = 0
    try:
        doomed = [key for key in client.scan_iter(count=1000) if key not in kept]
        for start in range(0, len(doomed), 500):
            deleted += int(client.delete(*doomed[start : start + 500]))
    finally:
        client.close()
    return deleted


def kill_db_connections(database_url: str) -> int:
    """``pg_terminate_backend`` every other connection to the run's database."""
    import psycopg

    from toolsafe.recovery.db import normalize_url

    url = normalize_url(database_url).set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (killed,) in rows if killed)


def restart_database(command: str, database_url: str, timeout: float = 60.0) -> float:
    """Restart the PostgreSQL server with ``command`` and wait until the run's database
    answers again; returns the seconds it was away."""
    import shlex

    import psycopg

    from toolsafe.recovery.db import normalize_url

    url = normalize_url(database_url).set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    started = time.monotonic()
    subprocess.run(shlex.split(command), check=True, timeout=timeout, capture_output=True)
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return time.monotonic() - started
        except psycopg.OperationalError:
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.2)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Proc:
    """One child process with its output in a log file."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            self.argv,
            env=dict(self.env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def poll(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class Workers:
    """N real ``celery worker`` processes (solo pool: a SIGKILL at a fault point kills
    the whole worker), each restarted as soon as it is found dead."""

    count: int
    env: Mapping[str, str]
    workdir: Path
    run: str
    extra_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)  # return codes of dead workers

    def _proc(self, number: int) -> Proc:
        argv = [
            sys.executable,
            "-m",
            "toolsafe.cli.main",
            "worker",
            "--",
            "-P",
            "solo",
            "-n",
            f"chaos{number}-{self.run}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ]
        env = {**self.env, **self.extra_env.get(number, {})}
        return Proc(f"worker{number}", argv, env, self.workdir / f"worker{number}.log")

    def start(self) -> None:
        for number in range(self.count):
            proc = self._proc(number)
            proc.start()
            self.procs.append(proc)

    def restart_dead(self) -> int:
        """Restart every worker that exited; returns how many were restarted."""
        restarted = 0
        for number, proc in enumerate(self.procs):
            code = proc.poll()
            if code is None:
                continue
            self.exits.append(code)
            proc.stop()
            fresh = self._proc(number)
            fresh.start()
            self.procs[number] = fresh
            restarted += 1
        return restarted

    def killed(self) -> int:
        return sum(1 for code in self.exits if code == -signal.SIGKILL)

    def stop(self) -> None:
        threads = [threading.Thread(target=proc.stop) for proc in self.procs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def start_beat(env: Mapping[str, str], workdir: Path) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "toolsafe.cli.main",
        "beat",
        "--",
        "-s",
        str(workdir / "beat-schedule"),
        "-l",
        "WARNING",
    ]
    proc = Proc("beat", argv, env, workdir / "beat.log")
    proc.start()
    return proc


class Downstream:
    """The example downstream service as a child process, naive by default (it ignores
    idempotency keys, so a duplicate execution shows as a second effect)."""

    def __init__(self, workdir: Path, env: Mapping[str, str], *, naive: bool = True) -> None:
        argv = [
            sys.executable,
            "-m",
            "toolsafe.adapters.examples.downstream",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        if naive:
            argv.append("--naive")
        self.errors = open(workdir / "downstream.log", "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=self.errors,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = self._read_url(timeout=20.0)
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    def _read_url(self, timeout: float) -> str:
        assert self.popen.stdout is not None
        found: list[str] = []
        reader = threading.Thread(
            target=lambda: found.append(self.popen.stdout.readline().decode().strip()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        if not found or not found[0].startswith("http"):
            self.stop()
            raise ChaosSetupError("the example downstream service did not start")
        return found[0]

    def add_fault(self, operation_ref: str, fault: Mapping[str, Any]) -> None:
        reply = self.http.post("/_control/faults", json={**fault, "operation_ref": operation_ref})
        if reply.status_code != 201:
            raise ChaosSetupError(f"the downstream refused a fault: {reply.text[:200]}")

    def effects(self) -> dict[str, int]:
        reply = self.http.get("/_control/effects")
        reply.raise_for_status()
        data: dict[str, int] = reply.json()
        return data

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if hasattr(self, "http"):
                self.http.close()
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.errors.close()


def write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def wait_until(predicate: Any, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
