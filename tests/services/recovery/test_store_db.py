"""Engines and durability: URLs, SQLite's settings, the infrastructure retry on a
dropped connection, fork safety, timezone-aware times, persistence across a restart."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError, StatementError

from tests.support.recovery.databases import end_connections
from tests.support.recovery.store_support import (
    LEASE,
    POLICY,
    T0,
    WRITE,
    create_step,
    force,
    retry_later,
)
from toolsafe.recovery.db import make_engine, normalize_url, unpinged, with_db_retry
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

S = StepState


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("sqlite:///x.db", "sqlite"),
    ],
)
def test_normalize_url_means_psycopg_3(given: str, driver: str) -> None:
    assert normalize_url(given).drivername == driver


def test_sqlite_runs_in_wal_mode_with_immediate_writes(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        # A write transaction holds the write lock from BEGIN: a second writer waits
        # (here: gives up at once) instead of failing halfway through its work.
        impatient = make_engine(sqlite_url, connect_args={"timeout": 0})
        with (
            engine.begin(),
            impatient.connect() as other,
            pytest.raises(DBAPIError, match="locked"),
        ):
            other.exec_driver_sql("BEGIN IMMEDIATE")
        impatient.dispose()
    finally:
        engine.dispose()


def test_database_constraints_hold_the_vocabulary(store: StepStore) -> None:
    create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=T0)
    with pytest.raises(IntegrityError):
        force(store, "r1", state="paused")
    with pytest.raises(IntegrityError):
        force(store, "r1", commit_state="probably")
    with pytest.raises(IntegrityError):
        force(store, "r1", attempts=POLICY.retry.max_attempts + 1)


def test_naive_datetimes_are_refused(store: StepStore) -> None:
    with pytest.raises(StatementError, match="aware"):
        create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=datetime(2026, 1, 1))


def test_times_come_back_aware_in_utc(store: StepStore) -> None:
    from zoneinfo import ZoneInfo

    local = T0.astimezone(ZoneInfo("Asia/Shanghai"))
    step, _ = create_step(store, "t", {}, operation_ref="r1", policy=POLICY, now=local)
    stored = store.get("r1")
    assert stored.due_at == T0 and stored.created_at.utcoffset() == timedelta(0)
    assert step.created_at == stored.created_at


def _persist_and_reopen(store: StepStore, reopen: str) -> None:
    claim = store.claim_execution("r1", "worker-1", LEASE, T0)
    assert claim is not None
    later = T0 + timedelta(minutes=7)
    store.record(
        claim,
        Executed(retry_later("r1", later, remaining=2)),
        traits=WRITE,
        policy=POLICY,
        now=T0,
        rng=random.Random(1),
    )
    before, events = store.get("r1"), store.events("r1")
    store.engine.dispose()
    engine = make_engine(reopen)
    try:
        again = StepStore(engine)
        assert again.get("r1") == before and again.events("r1") == events
        assert (before.attempts, before.max_attempts, before.due_at) == (1, 3, later)
        assert before.fingerprint is not None
        assert again.claim_execution("r1", "worker-2", LEASE, later) is not None
    finally:
        engine.dispose()


def test_counts_and_deadlines_survive_a_new_engine_sqlite(sqlite_url: str) -> None:
    store = StepStore(make_engine(sqlite_url))
    create_step(store, "create_invoice", {"a": 1}, operation_ref="r1", policy=POLICY, now=T0)
    _persist_and_reopen(store, sqlite_url)


@pytest.mark.postgres
def test_counts_and_deadlines_survive_a_new_engine_postgresql(
    pg_store: StepStore, store_pg_url: str
) -> None:
    store = StepStore(make_engine(store_pg_url))
    create_step(store, "create_invoice", {"a": 1}, operation_ref="r1", policy=POLICY, now=T0)
    _persist_and_reopen(store, store_pg_url)


@pytest.mark.postgres
def test_a_dropped_connection_is_retried_as_infrastructure(store_pg_engine: Engine) -> None:
    calls: list[int] = []

    def operation() -> int:
        with store_pg_engine.begin() as conn:
            calls.append(1)
            if len(calls) == 1:
                # The server ends this very session, as a PostgreSQL restart would.
                conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
            return int(conn.execute(text("SELECT 41 + 1")).scalar_one())

    assert with_db_retry(operation, sleep=lambda _: None) == 42
    assert len(calls) == 2


@pytest.mark.postgres
def test_other_database_errors_are_not_retried(store_pg_engine: Engine) -> None:
    calls: list[int] = []

    def operation() -> None:
        calls.append(1)
        with store_pg_engine.begin() as conn:
            conn.execute(text("SELECT 1 / 0"))

    with pytest.raises(DBAPIError, match="division by zero"):
        with_db_retry(operation, sleep=lambda _: None)
    assert len(calls) == 1


# ------------------------------------------------------------------ compiled statements


@pytest.mark.postgres
def test_a_compiled_statement_returns_what_sqlalchemy_returns(pg_store: StepStore) -> None:
    from toolsafe.recovery.store.sql import statements as sql
    from toolsafe.recovery.store.sql.compiled import compiled_for

    create_step(pg_store, "t", {"a": [1, {"b": None}]}, operation_ref="r1", policy=POLICY, now=T0)
    with pg_store.engine.begin() as conn:
        expected = conn.execute(sql.BY_REF, {"ref": "r1"}).first()
        found = compiled_for(sql.BY_REF, conn.dialect).first(conn, {"ref": "r1"})
        assert expected is not None and found is not None
        assert tuple(found) == tuple(expected) and found._fields == expected._fields
        assert found.created_at.tzinfo is not None and found.created_at.utcoffset() == timedelta(0)
        assert compiled_for(sql.BY_REF, conn.dialect).first(conn, {"ref": "none"}) is None
        with pytest.raises(StatementError, match="ref"):
            compiled_for(sql.BY_REF, conn.dialect).first(conn, {})


@pytest.mark.postgres
def test_without_the_internals_it_needs_a_statement_runs_through_sqlalchemy(
    pg_store: StepStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import Connection

    from toolsafe.recovery.store.sql import compiled, ops
    from toolsafe.recovery.store.sql import statements as sql

    monkeypatch.setattr(compiled, "_COMPILED", {})
    monkeypatch.setattr(compiled, "_INTERNALS", ((Connection, "_moved_in_a_new_release"),))
    create_step(pg_store, "t", {"a": 1}, operation_ref="r1", policy=POLICY, now=T0)
    with pg_store.engine.begin() as conn:
        runner = compiled.compiled_for(sql.BY_REF, conn.dialect)
        assert isinstance(runner, compiled.ThroughSQLAlchemy)
        expected = conn.execute(sql.BY_REF, {"ref": "r1"}).first()
        assert runner.first(conn, {"ref": "r1"}) == expected is not None
    # The hot path on the fallback: a claim and its record, as ever.
    assert pg_store.claim_execution("r1", "worker-1", timedelta(seconds=30), T0) is not None
    claim = compiled.compiled_for(ops._CLAIM_FAST, pg_store.engine.dialect)
    assert isinstance(claim, compiled.ThroughSQLAlchemy)


@pytest.mark.postgres
def test_a_compiled_statement_raises_and_retries_as_sqlalchemy_does(
    store_pg_engine: Engine,
) -> None:
    from sqlalchemy import literal_column, select

    from toolsafe.recovery.store.sql.compiled import Compiled

    failing = Compiled(select(literal_column("1 / 0").label("x")), store_pg_engine.dialect)
    with pytest.raises(DBAPIError, match="division by zero"), store_pg_engine.begin() as conn:
        failing.first(conn, {})
    answer = Compiled(select(literal_column("41 + 1").label("x")), store_pg_engine.dialect)
    calls: list[int] = []

    def operation() -> int:
        with store_pg_engine.begin() as conn:
            calls.append(1)
            if len(calls) == 1:
                # Ended from elsewhere: the compiled statement meets the dead connection.
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                with store_pg_engine.connect() as other:
                    other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            row = answer.first(conn, {})
            assert row is not None
            return int(row.x)

    assert with_db_retry(operation, sleep=lambda _: None) == 42
    assert len(calls) == 2


# ------------------------------------------------------------------ the ping on checkout


@pytest.mark.postgres
def test_a_pooled_connection_is_pinged_unless_its_caller_retries(store_pg_url: str) -> None:
    engine = make_engine(store_pg_url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        end_connections(store_pg_url)
        # The ping finds the pooled connection dead and the pool opens a new one.
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 41 + 1")).scalar_one() == 42
        end_connections(store_pg_url)
        # Unpinged, the dead connection fails the first statement, as a lost connection
        # (with_db_retry's cue), and the next checkout has a new one.
        with pytest.raises(DBAPIError) as raised, unpinged(), engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        assert raised.value.connection_invalidated
        with unpinged(), engine.connect() as conn:
            assert conn.execute(text("SELECT 41 + 1")).scalar_one() == 42
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_an_engine_without_the_ping_does_not_ping(store_pg_url: str) -> None:
    engine = make_engine(store_pg_url, pool_pre_ping=False, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        end_connections(store_pg_url)
        calls: list[int] = []

        def operation() -> int:
            calls.append(1)
            with engine.connect() as conn:
                return int(conn.execute(text("SELECT 41 + 1")).scalar_one())

        assert with_db_retry(operation, sleep=lambda _: None) == 42
        assert len(calls) == 2
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_transaction_left_open_frees_its_rows_after_the_bound(
    pg_store: StepStore, store_pg_url: str
) -> None:
    """A client that goes quiet inside a transaction (a worker stopped or cut off between
    two statements) loses its session after ``idle_transaction_timeout``, and the row it
    locked is free for the sweeper again; the URL's own ``options`` win."""
    create_step(pg_store, "create_invoice", {"a": 1}, operation_ref="held", policy=POLICY, now=T0)
    show = text("SHOW idle_in_transaction_session_timeout")
    with pg_store.engine.connect() as conn:
        assert conn.execute(show).scalar() == "30s"
    theirs = make_engine(f"{store_pg_url}?options=-c%20idle_in_transaction_session_timeout%3D0")
    quiet = make_engine(store_pg_url, idle_transaction_timeout=0.2)
    lock = text("SELECT id FROM steps WHERE operation_ref = 'held' FOR UPDATE SKIP LOCKED")
    try:
        with theirs.connect() as conn:
            assert conn.execute(show).scalar() == "0"
        with quiet.connect() as holder:
            holder.begin()
            assert holder.execute(lock).first() is not None
            # The holder says nothing more; the sweeper's kind of read skips the row
            # only until the server ends the holder's session.
            deadline = time.monotonic() + 30
            with pg_store.engine.connect() as sweeper:
                while sweeper.execute(lock).first() is None:
                    sweeper.rollback()
                    assert time.monotonic() < deadline, "the quiet transaction kept its lock"
                    time.sleep(0.05)
                sweeper.rollback()
            with pytest.raises(DBAPIError):
                holder.execute(text("SELECT 1"))
    finally:
        theirs.dispose()
        quiet.dispose()
