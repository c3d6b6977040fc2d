"""The Alembic migrations produce exactly the models' schema, on PostgreSQL and SQLite,
and the state CHECK constraint holds exactly the ``StepState`` vocabulary."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from tests.support.recovery.databases import empty_engine
from toolsafe.adapters.envelope import COMMIT_STATES
from toolsafe.recovery.db import (
    alembic_config,
    make_engine,
    migrate,
    migrations_path,
    normalize_url,
)
from toolsafe.recovery.schema import Base, include_object
from toolsafe.recovery.states import StepState


def _differences(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "include_object": include_object(conn.dialect.name),
        },
    )
    return list(compare_metadata(context, Base.metadata))


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def fresh_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An empty database on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
        engine = make_engine(url)
        yield engine
        engine.dispose()
        return
    base = normalize_url(request.getfixturevalue("pg_url"))
    name = f"{base.database}_migrations"
    admin = base.set(drivername="postgresql", database="postgres").render_as_string(False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(base.set(database=name))
    yield engine
    engine.dispose()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_migrations_produce_the_models_schema(fresh_engine: Engine) -> None:
    migrate(_url(fresh_engine))
    with fresh_engine.connect() as conn:
        assert _differences(conn) == []


def _index_definitions(conn: Connection) -> dict[str, str]:
    """Every index as the database states it: PostgreSQL's own definition (columns,
    operator classes, a partial index's predicate); SQLite's columns, uniqueness and
    whether it is partial."""
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes "
                "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
        ).all()
        return {str(name): str(definition) for name, definition in rows}
    found = {}
    tables = "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'alembic_version'"
    for table in conn.execute(text(tables)):
        for _seq, name, unique, _origin, partial in conn.execute(
            text(f"PRAGMA index_list('{table[0]}')")
        ).all():
            columns = [row[2] for row in conn.execute(text(f"PRAGMA index_info('{name}')"))]
            found[str(name)] = f"{table[0]} {columns} unique={unique} partial={partial}"
    return found


def test_migrations_produce_the_models_indexes_exactly(
    fresh_engine: Engine, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Alembic's comparison does not look at a partial index's predicate or an operator
    class: the definitions are compared as the database states them."""
    migrate(_url(fresh_engine))
    with empty_engine(fresh_engine.dialect.name, request, tmp_path, "models") as models:
        Base.metadata.create_all(models)
        with models.connect() as conn:
            expected = _index_definitions(conn)
    with fresh_engine.connect() as conn:
        assert _index_definitions(conn) == expected
    assert ("ix_steps_in_flight" in expected) == (fresh_engine.dialect.name == "postgresql")


def test_the_comparison_notices_a_missing_index(fresh_engine: Engine) -> None:
    migrate(_url(fresh_engine))
    index = (
        "ix_steps_due_work"
        if fresh_engine.dialect.name == "postgresql"
        else ("ix_steps_state_due_at")
    )
    with fresh_engine.begin() as conn:
        conn.execute(text(f"DROP INDEX {index}"))
        found = _differences(conn)
    assert [(diff[0], diff[1].name) for diff in found] == [("add_index", index)]


def test_migrate_is_repeatable_and_downgrades(fresh_engine: Engine) -> None:
    url = _url(fresh_engine)
    migrate(url)
    migrate(url)
    command.downgrade(alembic_config(url), "base")
    with fresh_engine.connect() as conn:
        assert _differences(conn) != []
    migrate(url)
    with fresh_engine.connect() as conn:
        assert _differences(conn) == []
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head


def _check_values(conn: Connection, constraint: str) -> set[str]:
    if conn.dialect.name == "postgresql":
        definition = conn.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
            {"name": constraint},
        ).scalar_one()
    else:
        table_sql = conn.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'steps'")
        ).scalar_one()
        match = re.search(rf"CONSTRAINT {constraint} CHECK \((.*?)\)\s*,?\s*$", table_sql, re.M)
        assert match is not None
        definition = match.group(1)
    return set(re.findall(r"'([a-z_]+)'", definition))


def test_check_constraints_hold_exactly_the_vocabularies(fresh_engine: Engine) -> None:
    migrate(_url(fresh_engine))
    with fresh_engine.connect() as conn:
        assert _check_values(conn, "ck_steps_state") == {state.value for state in StepState}
        assert _check_values(conn, "ck_steps_commit_state") == set(COMMIT_STATES)


def test_the_migration_snapshot_matches_the_state_enum() -> None:
    path = next((migrations_path() / "versions").glob("0001_*.py"))
    spec = importlib.util.spec_from_file_location("migration_0001", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.STATES) == {state.value for state in StepState}
    assert set(module.COMMIT_STATES) == set(COMMIT_STATES)
