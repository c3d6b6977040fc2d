"""What every benchmark program shares: the Redis database and PostgreSQL database it
owns for the run, real ``celery worker`` subprocesses (through ``toolsafe.harness``), and
the machine's load."""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import psycopg
import redis
from sqlalchemy.engine import make_url

from toolsafe import harness
from toolsafe.harness import SESSION_LOCK_KEY, HarnessError, Process, check_broker, flush_broker

ROOT: Final = Path(__file__).resolve().parents[1]
DEFAULT_BROKER: Final = "redis://127.0.0.1:6379/12"
DEFAULT_DATABASE: Final = "postgresql://postgres@127.0.0.1:5432/toolsafe_bench"
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
        self.number = check_broker(url)
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
            SESSION_LOCK_KEY, self._token, nx=True, ex=6 * 3600
        ):
            raise BenchError(
                f"Redis database {self.number} is in use (key {SESSION_LOCK_KEY!r} is set by a "
                "test session or another benchmark); choose another with --broker"
            )
        self.clear()
        return self

    def __exit__(self, *_: object) -> None:
        self.clear()
        if not self.held_by_caller and self.client.get(SESSION_LOCK_KEY) == self._token.encode():
            self.client.delete(SESSION_LOCK_KEY)
        self.client.close()

    def clear(self) -> None:
        """Delete every key of our database but the lock (queues, unacked messages)."""
        flush_broker(self.url)

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

RELAY: Final = {"TOOLSAFE_SUBMIT_HINTS": "relay"}
"""``worker_env``'s extra for a client or worker with the hint relay (tasks/relay.py)."""


def worker_env(
    broker: str, database: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a toolsafe or baseline worker (both read ``TOOLSAFE_*``).

    No ``PYTHONPATH``: every child runs ``python -m`` in ``ROOT``, which puts ``ROOT``
    (and so ``benchmarks``) first on its path; an interpreter-level setting of its own
    would also keep it from a preloaded interpreter (``toolsafe.harness.preload``)."""
    settings = {
        "TOOLSAFE_BROKER_URL": broker,
        "TOOLSAFE_DATABASE_URL": database,
        "TOOLSAFE_ADAPTERS": "benchmarks.noop_adapter",
    }
    return harness.child_env({**settings, **(extra or {})})


def backend_cpu_seconds(database: BenchDatabase) -> float:
    """CPU of the PostgreSQL server processes connected to the benchmark's database (the
    server runs on this machine; other databases' backends are not counted)."""
    with database.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database.name,),
        ).fetchall()
    return sum(harness.cpu_seconds(int(str(pid))) for (pid,) in rows)


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
    beat_schedule: Path | None = None,
) -> Process:
    """A worker with a node name of its own; ``with worker:`` SIGKILLs it at the end.
    ``beat_schedule`` runs beat inside it (``-B``), its schedule file there."""
    options = harness.WorkerOptions(
        name=f"{name}-{uuid.uuid4().hex[:6]}",
        app=app,
        queues=queues,
        pool=pool,
        concurrency=concurrency,
        loglevel=loglevel,
        without=("mingle", "gossip"),
        beat_schedule=beat_schedule,
    )
    return harness.start_worker(options, env=env, directory=directory, cwd=ROOT)


def wait_worker_ready(
    worker: Process, app: Any, node: str, loglevel: str, timeout: float = 90.0
) -> float:
    """Seconds from the worker's start until it is ready: its " ready." line at DEBUG or
    INFO, an answered control ping at a quieter level (which prints no such line)."""
    if loglevel.upper() in {"DEBUG", "INFO"}:
        return worker.wait_ready(timeout)
    harness.wait_until(
        lambda: bool(app.control.ping(destination=[node], timeout=0.5)),
        timeout,
        f"{worker.name} to answer a ping",
        interval=0.2,
    )
    return time.monotonic() - worker.started


def start_beat(app: str, *, env: Mapping[str, str], directory: Path) -> Process:
    name = f"beat-{uuid.uuid4().hex[:6]}"
    return harness.start_beat(
        env=env, directory=directory, schedule=directory / f"{name}-schedule", name=name,
        app=app, cwd=ROOT,
    )  # fmt: skip


# ------------------------------------------------------------------ measuring


# How often the benchmarks poll a condition (``harness.wait_until``): a coarser interval
# would add up to that much to every measured batch.
POLL: Final = 0.01


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
    except (BenchError, HarnessError) as error:
        sys.stderr.write(f"benchmark: error: {error}\n")
        return 2
