"""The SQL backend as :func:`~toolsafe.recovery.store.backend.open_store` opens it for
``postgresql://`` (and its driver forms) and ``sqlite://`` URLs: the step store on a new
engine, with every optional feature (keys, overview, tally, retention, workers, clock;
``loop_reads`` on PostgreSQL only: SQLite's driver has no asynchronous connection)."""

from __future__ import annotations

import functools

from toolsafe.recovery.db import make_engine
from toolsafe.recovery.store.backend import Backend, StoreOptions
from toolsafe.recovery.store.sql.clock import SqlClock
from toolsafe.recovery.store.sql.keys import KeyStore
from toolsafe.recovery.store.sql.loop_reads import LoopReads
from toolsafe.recovery.store.sql.overview import Overview
from toolsafe.recovery.store.sql.retention import SqlRetention
from toolsafe.recovery.store.sql.steps import StepStore
from toolsafe.recovery.store.sql.tally import SqlTally
from toolsafe.recovery.store.sql.workers import WorkerRegistry

__all__ = ["open_sql", "sql_backend"]


def sql_backend(store: StepStore, *, dispose: bool = True) -> Backend:
    """The backend around ``store``; closing it disposes the engine when ``dispose``."""
    engine = store.engine
    return Backend(
        engine.dialect.name,
        store,
        keys=KeyStore(engine),
        overview=Overview(engine),
        tally=SqlTally(store),
        retention=SqlRetention(store),
        workers=WorkerRegistry(engine),
        clock=SqlClock(engine),
        loop_reads=(
            functools.partial(LoopReads, engine) if engine.dialect.name == "postgresql" else None
        ),
        close=engine.dispose if dispose else None,
    )


def open_sql(url: str, options: StoreOptions) -> Backend:
    """A store on a new engine for this process (``options.pre_ping``: see
    :class:`~toolsafe.recovery.store.backend.StoreOptions`)."""
    engine = make_engine(url, pool_pre_ping=options.pre_ping)
    return sql_backend(StepStore(engine, poll_interval=options.poll_interval))
