"""Store fixtures: one migrated PostgreSQL database for the store tests (emptied before
each test), a migrated SQLite file copied per test, and every implementation of the
port in turn (``any_store``: memory, a backend of the tests' own, SQLite, PostgreSQL)."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete

from tests.support.recovery import journal_store
from tests.support.recovery.databases import own_database
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.schema import escalation_outbox, step_events, steps
from toolsafe.recovery.store import StorePort, open_store
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.sql import StepStore


@pytest.fixture(scope="session")
def store_pg_url(pg_url: str) -> Iterator[str]:
    """A database of its own, so emptying it never disturbs other tests' data."""
    with own_database(pg_url, "store") as url:
        migrate(url)
        yield url


@pytest.fixture(scope="session")
def store_pg_engine(store_pg_url: str) -> Iterator[Engine]:
    engine = make_engine(store_pg_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "template.db"
    migrate(f"sqlite:///{path}")
    return path


def empty(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(escalation_outbox))
        conn.execute(delete(step_events))
        conn.execute(delete(steps))


@pytest.fixture
def pg_store(store_pg_engine: Engine) -> StepStore:
    empty(store_pg_engine)
    return StepStore(store_pg_engine)


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "steps.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[StepStore]:
    engine = make_engine(sqlite_url)
    yield StepStore(engine)
    engine.dispose()


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def store(request: pytest.FixtureRequest) -> StepStore:
    """The store on each backend."""
    name = "pg_store" if request.param == "postgresql" else "sqlite_store"
    found: StepStore = request.getfixturevalue(name)
    return found


@pytest.fixture(
    params=["memory", "journal", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def any_store(request: pytest.FixtureRequest) -> StorePort:
    """Each implementation of the port, empty (the contract tests run on all four: the
    second is a backend written in the tests, opened by its own scheme)."""
    if request.param == "memory":
        return MemoryStore(rng=random.Random(0))
    if request.param == "journal":
        journal_store.register()
        return open_store("journal://contract").steps
    name = "pg_store" if request.param == "postgresql" else "sqlite_store"
    found: StepStore = request.getfixturevalue(name)
    return found
