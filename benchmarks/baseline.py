"""The plain-Celery baseline: a no-op task, a hand-rolled INSERT, call, UPDATE task, and
a task that sends itself again with an ``eta`` and records when that second run started
(the ETA-lateness benchmark's).

``celery -A benchmarks.baseline worker`` finds the app, built on first use from the same
``TOOLSAFE_*`` environment as toolsafe's own app and with the same Celery settings
(``toolsafe.celeryconfig.build_config``), so only what toolsafe adds differs between the two.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from typing import Any, Final

from celery import Celery
from kombu.entity import Queue
from sqlalchemy import Engine, text

from toolsafe.celeryconfig import build_config
from toolsafe.recovery.db import make_engine
from toolsafe.settings import Settings

QUEUE: Final = "bench.plain"
NOOP_TASK: Final = "bench.noop"
ROWS_TASK: Final = "bench.rows"
STAMP_TASK: Final = "bench.stamp"
# Recovery benchmark only: how long an unacknowledged message waits before the broker
# hands it out again, and how often workers look for such messages.
VISIBILITY_ENV: Final = "TOOLSAFE_BENCH_VISIBILITY_TIMEOUT"
RESTORE_ENV: Final = "TOOLSAFE_BENCH_RESTORE_INTERVAL"

CALLS_TABLE_DDL: Final = """
CREATE TABLE IF NOT EXISTS bench_calls (
    id BIGSERIAL PRIMARY KEY,
    operation_ref TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
)
"""
# No unique key on operation_ref, on purpose: this is the naive task a team writes
# first, and a redelivery after a crash shows up as a second row.
_INSERT = text(
    "INSERT INTO bench_calls (operation_ref, state, created_at, updated_at) "
    "VALUES (:ref, 'started', clock_timestamp(), clock_timestamp()) RETURNING id"
)
_UPDATE = text(
    "UPDATE bench_calls SET state = 'done', updated_at = clock_timestamp() WHERE id = :id"
)

STAMPS_TABLE_DDL: Final = """
CREATE TABLE IF NOT EXISTS bench_stamps (
    ref TEXT PRIMARY KEY,
    due DOUBLE PRECISION NOT NULL,
    started DOUBLE PRECISION NOT NULL
)
"""
_STAMP = text("INSERT INTO bench_stamps (ref, due, started) VALUES (:ref, :due, :started)")

_engines: dict[int, Engine] = {}
_lock = threading.Lock()


def _engine(url: str) -> Engine:
    # One engine per process, made after the prefork fork (DESIGN §8), like toolsafe's.
    with _lock:
        engine = _engines.get(os.getpid())
        if engine is None:
            engine = _engines[os.getpid()] = make_engine(url)
        return engine


def create_app(settings: Settings | None = None) -> Celery:
    """A Celery app with toolsafe's Celery settings and the baseline tasks."""
    settings = settings if settings is not None else Settings.from_env()
    app = Celery("bench-baseline", set_as_current=False)
    config = build_config(settings)
    config.update(
        task_queues=(Queue(QUEUE, routing_key=QUEUE),),  # type: ignore[no-untyped-call]
        task_default_queue=QUEUE,
        task_routes={name: {"queue": QUEUE} for name in (NOOP_TASK, ROWS_TASK, STAMP_TASK)},
        beat_schedule={},
    )
    visibility = os.environ.get(VISIBILITY_ENV)
    if visibility:
        options = dict(config["broker_transport_options"])
        options["visibility_timeout"] = float(visibility)
        options["unacked_restore_interval"] = float(os.environ.get(RESTORE_ENV, "1"))
        options["unacked_restore_throttle"] = 1
        config["broker_transport_options"] = options
    app.conf.update(config)
    database_url = settings.store.url
    options = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}

    @app.task(name=NOOP_TASK, **options)  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    @app.task(name=ROWS_TASK, **options)  # type: ignore[untyped-decorator]
    def rows(operation_ref: str, call_ms: float = 1.0) -> None:
        engine = _engine(database_url)
        with engine.begin() as conn:
            row_id = conn.execute(_INSERT, {"ref": operation_ref}).scalar_one()
        time.sleep(call_ms / 1000)
        with engine.begin() as conn:
            conn.execute(_UPDATE, {"id": row_id})

    @app.task(name=STAMP_TASK, **options)  # type: ignore[untyped-decorator]
    def stamp(ref: str, delay: float, due: float | None = None) -> None:
        # The first run sends the task again with ``eta`` = ``delay`` seconds later (as
        # toolsafe's worker publishes a retry's hint); the second records when its body
        # started (epoch seconds) next to that ``eta``.
        started = time.time()
        engine = _engine(database_url)
        if due is None:
            # Open this process's pooled connection now, as toolsafe's first attempt
            # does: the retry must not pay for it.
            with engine.connect():
                pass
            due = started + delay
            when = datetime.fromtimestamp(due, UTC)
            app.send_task(STAMP_TASK, args=(ref, delay, due), eta=when)
            return
        with engine.begin() as conn:
            conn.execute(_STAMP, {"ref": ref, "due": due, "started": started})

    return app


_app: Celery | None = None


def __getattr__(name: str) -> Any:
    # ``celery -A benchmarks.baseline`` asks for ``app``; built on first use, not at import.
    global _app
    if name in ("app", "celery"):
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
