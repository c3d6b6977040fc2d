"""The harness of the end-to-end tests: a fresh PostgreSQL database, the session's
Redis database, the example downstream (naive: every POST is an effect) and real
``celery worker`` subprocesses with short leases and sweep intervals."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg

from tests.support.machine import session_machine
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.examples.downstream_state import Fault
from toolsafe.celeryconfig import QUEUES
from toolsafe.chaos.checks import StepFacts, check_steps
from toolsafe.harness import (
    Process,
    WorkerOptions,
    flush_broker,
    start_worker,
    stop_all,
    wait_until,
)
from toolsafe.recovery.db import migrate
from toolsafe.recovery.states import StepState
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

ROOT = Path(__file__).resolve().parents[3]
WORKER_STARTUP = 40.0  # seconds; two prefork workers on a loaded machine

# Short enough that a lease expiry, a sweep and a verification take a few seconds.
FAST_SETTINGS = {
    "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
    "TOOLSAFE_LEASE_SECONDS": "3",
    "TOOLSAFE_TASK_TIME_LIMIT": "2.5",
    "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "2",
    "TOOLSAFE_SWEEP_INTERVAL": "0.5",
    "TOOLSAFE_REPUBLISH_AFTER": "1",
    "TOOLSAFE_MAX_ETA": "5",
    "TOOLSAFE_ETA_JITTER": "0.05",
    "TOOLSAFE_VISIBILITY_TIMEOUT": "300",
    "TOOLSAFE_RETRY_BASE_DELAY": "0.1",
    "TOOLSAFE_RETRY_MAX_DELAY": "0.5",
    "TOOLSAFE_VERIFY_BASE_DELAY": "0.2",
    "TOOLSAFE_VERIFY_MAX_DELAY": "0.5",
    "TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE": "3",
    # A lookup that stays down escalates after seconds here (the default is minutes).
    "TOOLSAFE_VERIFY_BUDGET": "2",
    "TOOLSAFE_EXAMPLE_TIMEOUT": "1",
    "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "2",
}


# The worker's own deadlines, times the session's machine factor: on a starved machine a
# call must not hit its time limit, nor a live worker lose its lease, for want of CPU.
# The adapter's timeout and the consistency window stay: tests set faults against them.
SCALED = ("TOOLSAFE_LEASE_SECONDS", "TOOLSAFE_TASK_TIME_LIMIT", "TOOLSAFE_TASK_SOFT_TIME_LIMIT")


def scaled_deadlines() -> dict[str, str]:
    factor = session_machine().factor
    return {name: f"{float(FAST_SETTINGS[name]) * factor:.2f}" for name in SCALED}


def new_ref(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


# Migrated databases handed back by fresh_database(), emptied, per session database: the
# next module takes one instead of paying a CREATE DATABASE, a migration and a DROP
# DATABASE (which forces a checkpoint of the whole server) of its own. The session's
# pg_url fixture drops them with the session's database.
_EMPTIED: dict[str, list[str]] = {}


def _admin(base: str) -> str:
    return f"{base}/postgres".replace("postgresql+psycopg://", "postgresql://")


def _empty(url: str) -> None:
    """Every table but Alembic's truncated and every identity restarted: what a fresh
    migration leaves; other connections to the database are ended first."""
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables"
                " WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
        ]
        if tables:
            listed = ", ".join(f'"{table}"' for table in tables)
            conn.execute(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")


@contextlib.contextmanager
def fresh_database(pg_url: str, suffix: str) -> Iterator[str]:
    """A migrated, empty database of its own next to the session's. On exit it is emptied
    (``_empty``: as fresh as a new one) and kept for the next caller."""
    base, _, session_db = pg_url.rpartition("/")
    free = _EMPTIED.setdefault(pg_url, [])
    if free:
        url = free.pop()
    else:
        name = f"{session_db}_{suffix}"[:63]
        with psycopg.connect(_admin(base), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = f"{base}/{name}"
        migrate(url)
    try:
        yield url
    finally:
        _empty(url)
        free.append(url)


class Webhook:
    """An HTTP server that records the escalation notices POSTed to it (and their
    ``Idempotency-Key``); it answers 503 to the next ``failures`` posts."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        keys: list[str] = []
        self.received = received
        self.keys = keys
        self.failures = 0
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                if webhook.failures > 0:
                    webhook.failures -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                received.append(body)
                keys.append(self.headers.get("Idempotency-Key", ""))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/escalations"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _measured() -> bool:
    """Whether this test session runs under coverage."""
    coverage = sys.modules.get("coverage")
    return coverage is not None and coverage.Coverage.current() is not None


@dataclass
class Cluster:
    """Workers and a client that share one broker, database and downstream."""

    env: dict[str, str]
    directory: Path
    downstream: DownstreamService
    webhook: Webhook
    workers: list[Process] = field(default_factory=list)
    _client: Client | None = None

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    @property
    def client(self) -> Client:
        if self._client is None:
            # The example adapters get their downstream from these settings.
            client = Client(create_app(self.settings))
            client.runtime.registry  # noqa: B018 - load the adapters now
            self._client = client
        return self._client

    def start_worker(
        self,
        name: str,
        *,
        concurrency: int = 2,
        beat: bool = True,
        pool: str = "prefork",
        extra_env: dict[str, str] | None = None,
        wait: bool = True,
        via_cli: bool = False,
        queues: tuple[str, ...] = QUEUES,
    ) -> Process:
        """A ``celery -A toolsafe worker`` (or ``toolsafe worker``) subprocess."""
        unique = f"{name}-{uuid.uuid4().hex[:6]}"
        options = WorkerOptions(
            name=unique,
            # `toolsafe worker` adds the queues itself.
            app=None if via_cli else "toolsafe",
            queues=() if via_cli else queues,
            pool=pool,
            concurrency=concurrency,
            beat_schedule=self.directory / f"{unique}-beat" if beat else None,
        )
        env = {**os.environ, **self.env, **(extra_env or {})}
        worker = start_worker(options, env=env, directory=self.directory, cwd=ROOT)
        self.workers.append(worker)
        if wait:
            worker.wait_ready(WORKER_STARTUP)
        return worker

    def stop_workers(self) -> None:
        """Stop every worker at once. Tests need no graceful drain: a redelivered or lost
        hint is harmless (R1), so the workers are SIGKILLed (a warm shutdown waits for
        the calls in flight, seconds per worker). Under ``make coverage`` they stop with
        SIGTERM, so that they (and their pool children) write what they measured."""
        if _measured():
            stop_all(self.workers, grace=15)
        else:
            for worker in self.workers:
                worker.kill()
        self.workers.clear()

    def stop(self) -> None:
        """The workers stopped and the client closed."""
        self.stop_workers()
        if self._client is not None:
            self._client.close()
            self._client = None

    def effects(self, operation_ref: str) -> int:
        return self.downstream.effects().get(operation_ref, 0)

    def fault(self, **spec: Any) -> Fault:
        return self.downstream.state.add_fault(spec)

    def clear_fault(self, fault: Fault) -> None:
        self.downstream.state.clear_fault(fault)

    def wait_for(
        self,
        check: Callable[[], bool],
        timeout: float = 20.0,
        what: str = "condition",
        interval: float = 0.05,
    ) -> None:
        """Wait until ``check()``; a timeout fails the test with the workers' logs. The
        deadline is ``timeout`` times the session's machine factor: a deadline only ends a
        wait that would never succeed, it is no bound on how fast the machine is."""
        patience = session_machine().factor
        wait_until(check, timeout * patience, what, interval=interval, context=self.logs)

    def logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.text()[-4000:]}" for w in self.workers)

    def violations(self, refs: Iterable[str]) -> list[str]:
        """The promises a run keeps whatever path its steps took, broken for ``refs``: at
        most one downstream effect each, a succeeded step's write found there exactly
        once, and the chaos run's checks of the store against itself (executions within
        the tool's limit and all counted; the envelope agreeing with the state)."""
        store = self.client.runtime.store
        effects = self.downstream.effects()
        found: list[str] = []
        facts = []
        for ref in refs:
            step = store.get(ref)
            count = effects.get(ref, 0)
            if count > 1 or (step.state is StepState.SUCCEEDED and count != 1):
                found.append(f"{ref}: {step.state.value} with {count} downstream effect(s)")
            limit = self.client.runtime.policy_for(step.tool).retry.max_attempts
            facts.append(StepFacts.of(step, store.events(ref), limit))
        found.extend(str(violation) for violation in check_steps(facts))
        return found

    def went_through(self, operation_ref: str, *stops: StepState) -> bool:
        """Whether the step's path holds ``stops`` in this order (a subsequence: a lease
        that expired on a starved machine may add a verification loop between them, which
        is recovery doing its work, not a broken promise)."""
        path = iter(self.states(operation_ref))
        return all(any(state is stop for state in path) for stop in stops)

    def states(self, operation_ref: str) -> list[StepState]:
        """The states the step went through, in order, without repeats."""
        path: list[StepState] = []
        for event in self.client.runtime.store.events(operation_ref):
            if event.to_state is not None and (not path or path[-1] != event.to_state):
                path.append(event.to_state)
        return path


@contextlib.contextmanager
def _database(pg_url: str, directory: Path, suffix: str, sqlite: bool) -> Iterator[str]:
    if not sqlite:
        with fresh_database(pg_url, suffix) as url:
            yield url
        return
    url = f"sqlite:///{directory / (suffix + '.db')}"
    migrate(url)
    yield url


@contextlib.contextmanager
def cluster_for(
    pg_url: str,
    redis_url: str,
    directory: Path,
    *,
    suffix: str,
    env: dict[str, str] | None = None,
    sqlite: bool = False,
    naive: bool = True,
) -> Iterator[Cluster]:
    """Downstream (naive unless told otherwise), webhook and a migrated database
    (PostgreSQL, or an SQLite file)."""
    downstream = DownstreamService(naive=naive).start()
    webhook = Webhook()
    try:
        with _database(pg_url, directory, suffix, sqlite) as database_url:
            plan = directory / "faults.json"
            plan.write_text("{}", encoding="utf-8")
            settings_env = {
                **FAST_SETTINGS,
                **scaled_deadlines(),
                "TOOLSAFE_BROKER_URL": redis_url,
                "TOOLSAFE_DATABASE_URL": database_url,
                "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream.url,
                "TOOLSAFE_ESCALATION_WEBHOOK_URL": webhook.url,
                "TOOLSAFE_FAULTS_ENABLED": "1",
                "TOOLSAFE_FAULT_PLAN": str(plan),
                **(env or {}),
            }
            cluster = Cluster(settings_env, directory, downstream, webhook)
            # Hints left by an earlier module would queue ahead of this one's.
            flush_broker(redis_url)
            try:
                yield cluster
            finally:
                cluster.stop()
                flush_broker(redis_url)
    finally:
        webhook.stop()
        downstream.stop()
