"""The store's ``clock`` feature: the SQL backend reads its database's own time
(PostgreSQL's ``clock_timestamp()``; SQLite's ``'now'``, which is this machine's clock,
so the runtime never asks it), timezone-aware and in UTC; a runtime on PostgreSQL
measures its offset from it (the database runs on this machine here: about zero)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from toolsafe.recovery.store import open_store
from toolsafe.settings import Settings
from toolsafe.tasks.runtime import Runtime

# The database and this process share the machine's clock: they agree to within a
# round trip and the resolution of the answer (SQLite's is a millisecond).
CLOSE = timedelta(seconds=1)


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def url(request: pytest.FixtureRequest) -> str:
    name = "store_pg_url" if request.param == "postgresql" else "sqlite_url"
    found: str = request.getfixturevalue(name)
    return found


def test_the_sql_backend_reads_its_databases_time(url: str) -> None:
    backend = open_store(url)
    try:
        assert backend.has("clock")
        clock = backend.clock
        assert clock.same_host is url.startswith("sqlite")
        before = datetime.now(UTC)
        first = clock.database_time()
        second = clock.database_time()
        after = datetime.now(UTC)
        assert first.utcoffset() == timedelta(0) and second.utcoffset() == timedelta(0)
        assert before - CLOSE <= first <= second <= after + CLOSE
    finally:
        backend.close()


@pytest.mark.postgres
def test_a_runtime_on_postgresql_measures_its_offset(store_pg_url: str) -> None:
    runtime = Runtime(Settings().replace(store={"url": store_pg_url}))
    try:
        before = datetime.now(UTC)
        now = runtime.now()
        assert before - CLOSE <= now <= datetime.now(UTC) + CLOSE
        assert abs(runtime.clock.offset) < CLOSE
        assert runtime.clock.measure()  # asked again: one query, no error
    finally:
        runtime.close()


def test_a_runtime_on_sqlite_never_asks(sqlite_url: str) -> None:
    runtime = Runtime(Settings().replace(store={"url": sqlite_url}))
    asked: list[bool] = []
    reader = runtime._database_time

    def counting() -> datetime | None:
        found = reader()
        asked.append(found is not None)
        return found

    runtime.clock._read = counting
    try:
        runtime.now()
        runtime.now()
        assert asked == [False] and runtime.clock.offset == timedelta(0)
    finally:
        runtime.close()


def test_the_memory_store_answers_its_own_time() -> None:
    backend = open_store("memory://")
    assert backend.has("clock") and backend.clock.same_host
    before = datetime.now(UTC)
    assert before <= backend.clock.database_time() <= datetime.now(UTC)
