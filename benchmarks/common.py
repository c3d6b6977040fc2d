"""What every benchmark program shares: the Redis database and PostgreSQL database it
owns for the run, real ``celery worker`` subprocesses, and the machine's load."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import psycopg
import redis
from sqlalchemy.engine import make_url

ROOT: Final = Path(__file__).resolve().parents[1]
DEFAULT_BROKER: Final = "redis://127.0.0.1:6379/12"
DEFAULT_DATABASE: Final = "postgresql://postgres@127.0.0.1:5432/toolsafe_bench"
# The key tests/conftest.py uses to hold a Redis database number: holding it keeps test
# sessions (and other benchmark runs) out of ours.
REDIS_LOCK_KEY: Final = "toolsafe-test-session-lock"
# kombu's Redis transport keeps delivered, unacknowledged messages here.
UNACKED_KEY: Final = "unacked"


class BenchError(Exception):
    """The benchmark cannot run as asked; the message says what to change."""


def add_service_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        default=DEFAULT_BROKER,
        help="Redis URL with a database number of its own (never 0); default %(default)s",
    )
    parser.add_argument(
        "--database",
        default=DEFAULT_DATABASE,
        help="PostgreSQL URL of a database the run creates and drops; default %(default)s",
    )
    parser.add_argument(
        "--drop-existing",
        action="store_true",
        help="drop the database first if an earlier run left it behind",
    )
    parser.add_argument(
        "--broker-held-by-caller",
        action="store_true",
        help="the caller already holds the Redis database (the test suite's fixture)",
    )


# ------------------------------------------------------------------ Redis


class BrokerDb:
    """One Redis database number, held for the run; cleared key by key, never FLUSHed."""

    def __init__(self, url: str, *, held_by_caller: bool = False) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise BenchError(f"--broker must be a redis:// URL, got {url!r}")
        try:
            self.number = int(parts.path.strip("/") or "0")
        except ValueError:
            raise BenchError(f"--broker database number must be a number: {url!r}") from None
        if self.number == 0:
            raise BenchError("--broker must name a Redis database other than 0, e.g. /12")
        self.url = url
        self.client = redis.Redis.from_url(url)
        self.held_by_caller = held_by_caller
        self._token = uuid.uuid4().hex

    def __enter__(self) -> BrokerDb:
        try:
            self.client.ping()
        except redis.RedisError as error:
            raise BenchError(f"Redis at {self.url} is not reachable: {error}") from None
        if not self.held_by_caller and not self.client.set(
            REDIS_LOCK_KEY, self._token, nx=True, ex=6 * 3600
        ):
            raise BenchError(
                f"Redis database {self.number} is in use (key {REDIS_LOCK_KEY!r} is set by a "
                "test session or another benchmark); choose another with --broker"
            )
        self.clear()
        return self

    def __exit__(self, *_: object) -> None:
        self.clear()
        if not self.held_by_caller and self.client.get(REDIS_LOCK_KEY) == self._token.encode():
            self.client.delete(REDIS_LOCK_KEY)
        self.client.close()

    def clear(self) -> None:
        """Delete every key of our database but the lock (queues, unacked messages)."""
        for key in self.client.scan_iter(count=1000):
            if key != REDIS_LOCK_KEY.encode():
                self.client.delete(key)

    def outstanding(self, queues: Sequence[str]) -> int:
        """Messages waiting in ``queues`` plus messages delivered and not yet acknowledged."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.llen(queue)
        pipe.hlen(UNACKED_KEY)
        return sum(int(count) for count in pipe.execute())


# ------------------------------------------------------------------ PostgreSQL


class BenchDatabase:
    """A PostgreSQL database created for the run (migrated) and dropped at the end."""

    def __init__(self, url: str, *, drop_existing: bool = False) -> None:
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql" or not parsed.database:
            raise BenchError(f"--database must be a postgresql:// URL naming a database: {url!r}")
        if parsed.database in ("postgres", "template0", "template1"):
            raise BenchError("--database must name a database of its own (it is dropped)")
        self.name = parsed.database
        self.url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        admin = parsed.set(drivername="postgresql", database="postgres")
        self.admin_url = admin.render_as_string(hide_password=False)
        self.libpq_url = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        self.drop_existing = drop_existing

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        try:
            return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as error:
            raise BenchError(f"PostgreSQL is not reachable: {error}") from None

    def __enter__(self) -> BenchDatabase:
        from toolsafe.recovery.db import migrate

        with self._admin() as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.name,)
            ).fetchone()
            if exists and not self.drop_existing:
                raise BenchError(
                    f"database {self.name!r} exists (an earlier run?); pass --drop-existing"
                )
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}"')
        try:
            migrate(self.url)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.libpq_url, autocommit=True)

    def execute(self, sql: str) -> None:
        with self.connect() as conn:
            conn.execute(sql.encode())


# ------------------------------------------------------------------ worker processes


def worker_env(
    broker: str, database: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a toolsafe or baseline worker (both read ``TOOLSAFE_*``)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}
    env.update(
        {
            "TOOLSAFE_BROKER_URL": broker,
            "TOOLSAFE_DATABASE_URL": database,
            "TOOLSAFE_ADAPTERS": "benchmarks.noop_adapter",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra or {})
    return env


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


def _cpu_seconds(group: int) -> float:
    """User + system CPU of the live processes of a process group (Linux /proc)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None and int(fields[2]) == group:
            total += _cpu(fields)
    return total


def backend_cpu_seconds(database: BenchDatabase) -> float:
    """CPU of the PostgreSQL server processes connected to the benchmark's database (the
    server runs on this machine; other databases' backends are not counted)."""
    with database.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database.name,),
        ).fetchall()
    total = 0.0
    for (pid,) in rows:
        fields = _stat(str(pid))
        if fields is not None:
            total += _cpu(fields)
    return total


@dataclass
class Worker:
    """A ``celery worker`` (or ``beat``) subprocess in a process group of its own."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.time)

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = 90.0, marker: str = " ready.") -> float:
        """Seconds from start until the worker said it is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.text():
                return time.time() - self.started
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise BenchError(f"{self.name} did not start:\n{self.text()[-3000:]}")

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.process.pid)

    def kill(self) -> None:
        """SIGKILL the whole worker: the main process and its pool children."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


def start_worker(
    app: str,
    queues: Sequence[str],
    *,
    env: Mapping[str, str],
    directory: Path,
    name: str,
    pool: str = "prefork",
    concurrency: int = 2,
    loglevel: str = "INFO",
) -> Worker:
    unique = f"{name}-{uuid.uuid4().hex[:6]}"
    command = [
        sys.executable, "-m", "celery", "-A", app, "worker", "-Q", ",".join(queues),
        "-P", pool, "-c", str(concurrency), "-n", f"{unique}@%h", "--loglevel", loglevel,
        "--without-mingle", "--without-gossip",
    ]  # fmt: skip
    return _spawn(command, env, directory, unique)


def start_beat(app: str, *, env: Mapping[str, str], directory: Path) -> Worker:
    unique = f"beat-{uuid.uuid4().hex[:6]}"
    schedule = directory / f"{unique}-schedule"
    command = [
        sys.executable, "-m", "celery", "-A", app, "beat", "-s", str(schedule),
        "--loglevel", "INFO",
    ]  # fmt: skip
    return _spawn(command, env, directory, unique)


def _spawn(command: list[str], env: Mapping[str, str], directory: Path, name: str) -> Worker:
    log = directory / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Worker(name, process, log)


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    try:
        yield worker
    finally:
        worker.kill()


# ------------------------------------------------------------------ measuring


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, interval: float = 0.01
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def header(title: str) -> None:
    """What was measured, when and on what: figures without their context mislead."""
    import celery
    import sqlalchemy

    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"# {title}")
    print(
        f"# {stamp}; {os.cpu_count()} CPUs; load average {load_average()}; "
        f"python {sys.version.split()[0]}, celery {celery.__version__}, "
        f"sqlalchemy {sqlalchemy.__version__}"
    )


def run_main(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    try:
        return main(argv)
    except BenchError as error:
        sys.stderr.write(f"benchmark: error: {error}\n")
        return 2
