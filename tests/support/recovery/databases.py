"""A PostgreSQL database of a test's own, beside the session's: created empty (dropped
first if an interrupted run left it), dropped with its connections at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from toolsafe.recovery.db import make_engine, normalize_url


@contextlib.contextmanager
def own_database(pg_url: str, suffix: str) -> Iterator[str]:
    """``<the session's database>_<suffix>`` on the session's server, as a URL."""
    base = normalize_url(pg_url)
    name = f"{base.database}_{suffix}"[:63]
    admin = base.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def empty_engine(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path, suffix: str
) -> Iterator[Engine]:
    """An engine on an empty database of ``dialect`` of the test's own: on PostgreSQL
    ``own_database(pg_url, suffix)``, on SQLite a file ``<suffix>.db`` in ``tmp_path``;
    disposed (and the PostgreSQL database dropped) at the end."""
    with contextlib.ExitStack() as stack:
        if dialect == "postgresql":
            url = stack.enter_context(own_database(request.getfixturevalue("pg_url"), suffix))
        else:
            url = f"sqlite:///{tmp_path / f'{suffix}.db'}"
        engine = make_engine(url)
        stack.callback(engine.dispose)
        yield engine


def end_connections(url: str) -> int:
    """End every session of ``url``'s database but the one asking (as a PostgreSQL
    restart would end them), from a connection outside any pool; how many it ended."""
    plain = normalize_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return 0 if ended is None else int(ended[0])
