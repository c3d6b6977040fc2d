"""``toolsafe chaos`` without --broker and --database: a Redis db and a PostgreSQL
database of its own on the local servers, released afterwards; and its bad options."""

from __future__ import annotations

import psycopg
import pytest
import redis

from tests.conftest import PG_ADMIN_URL, HeldRedis
from toolsafe.cli.main import main
from toolsafe.harness import HarnessError
from toolsafe.harness.local import REDIS_LOCK_KEY, database_of_its_own, redis_db_of_its_own


@pytest.mark.redis
def test_a_redis_db_of_its_own_is_held_emptied_and_released(redis_server: HeldRedis) -> None:
    # The server the session's own db is on (the shared one, or its own when every
    # number of the shared one is held).
    server = redis_server.server
    with redis_db_of_its_own(server) as first, redis_db_of_its_own(server) as second:
        assert first != second  # a second run (or test session) takes another db
        client = redis.Redis.from_url(first)
        try:
            assert client.get(REDIS_LOCK_KEY) is not None
            assert client.dbsize() == 1  # nothing but the lock
            client.set("queue-left-behind", "x")
        finally:
            client.close()
    client = redis.Redis.from_url(first)
    try:
        assert client.get(REDIS_LOCK_KEY) is None and client.get("queue-left-behind") is None
    finally:
        client.close()


def test_a_redis_server_that_does_not_answer_is_a_setup_error() -> None:
    unreachable = redis_db_of_its_own("redis://127.0.0.1:1")
    with pytest.raises(HarnessError, match="does not answer"), unreachable:
        pass


@pytest.mark.postgres
def test_a_database_of_its_own_is_created_and_dropped() -> None:
    with database_of_its_own(PG_ADMIN_URL, tag="h6test") as url:
        name = url.rsplit("/", 1)[1]
        assert name.startswith("toolsafe_h6test_")
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (name,)
    admin = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    assert found is None


def test_redis_restarts_refuse_a_broker_of_the_callers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["chaos", "--redis-restarts", "1", "--broker", "redis://127.0.0.1:6379/9"])
    assert code == 2
    assert "leave out --broker" in capsys.readouterr().err
    assert main(["chaos", "--redis-restarts", "-1"]) == 2
    assert "must not be negative" in capsys.readouterr().err
