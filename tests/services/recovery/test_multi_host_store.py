"""A multi-host URL against the real server: the first host listens nowhere (a primary
that died), the second is the session's PostgreSQL. Migrations, the store, the change
feed's own listening connection and the pool all find the host that takes writes; a
connection that lands on a server taking no writes is dropped like a lost one."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.store import open_store

pytestmark = pytest.mark.postgres


def _dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: nothing listens there


@pytest.fixture(scope="module")
def database(pg_url: str) -> Iterator[tuple[str, int, str]]:
    """A new database next to the session's: (host, port, name)."""
    live = make_url(pg_url)
    name = f"{live.database}_multihost_{uuid.uuid4().hex[:4]}"
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield str(live.host), int(live.port or 5432), name


def _urls(database: tuple[str, int, str]) -> list[str]:
    host, port, name = database
    dead = _dead_port()
    attrs = "target_session_attrs=read-write"
    return [
        f"postgresql+psycopg://postgres@127.0.0.1:{dead},{host}:{port}/{name}?{attrs}",
        f"postgresql+psycopg://postgres@/{name}?host=127.0.0.1:{dead}&host={host}:{port}&{attrs}",
    ]


@pytest.mark.parametrize("form", [0, 1], ids=["libpq-hosts", "query-hosts"])
def test_migrate_store_and_feed_work_through_a_multi_host_url(
    database: tuple[str, int, str], form: int
) -> None:
    url = _urls(database)[form]
    migrate(url)
    backend = open_store(url)
    try:
        assert backend.steps.step_summaries("none/") == []
        with backend.feed.subscribe("some/ref"):
            # The listener is a connection of its own, made from the same hosts.
            feed = backend.feed
            assert getattr(feed, "listens", False)
            assert feed.connected.wait(30), "the change feed never connected"  # type: ignore[attr-defined]
    finally:
        backend.close()


def test_a_connection_on_a_server_that_takes_no_writes_is_dropped(
    database: tuple[str, int, str],
) -> None:
    engine = make_engine(_urls(database)[0], pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            first = conn.connection.dbapi_connection
            # What a standby (or a demoted primary) answers to any write.
            conn.execute(text("SET SESSION default_transaction_read_only = on"))
            conn.commit()
            with pytest.raises(DBAPIError) as raised:
                conn.execute(text("CREATE TEMPORARY TABLE refused (id int)"))
            assert raised.value.connection_invalidated
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection is not first
            assert conn.execute(text("SHOW default_transaction_read_only")).scalar() == "off"
    finally:
        engine.dispose()
