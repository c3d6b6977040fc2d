"""Resources of a run's own on the local servers: a free Redis db number (held by a lock
key) and a fresh PostgreSQL database (dropped afterwards)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Final

from toolsafe.harness.errors import HarnessError

LOCAL_REDIS: Final = "redis://127.0.0.1:6379"
LOCAL_PG_ADMIN: Final = "postgresql://postgres@127.0.0.1:5432/postgres"
# The key that holds a Redis db for one run (the test suite uses the same one, so a run
# and a test session never share a db); a broker flush must leave it in place.
REDIS_LOCK_KEY: Final = "toolsafe-test-session-lock"


@contextlib.contextmanager
def redis_db_of_its_own(server: str = LOCAL_REDIS, ttl: int = 6 * 3600) -> Iterator[str]:
    """The URL of a Redis db number (1-15) on ``server`` that nobody else holds, emptied
    first; released (and emptied) afterwards."""
    import redis

    base = server.rstrip("/")
    token = uuid.uuid4().hex
    try:
        redis.Redis.from_url(f"{base}/0", socket_connect_timeout=3).ping()
    except redis.RedisError as error:
        raise HarnessError(
            f"Redis at {base} does not answer ({type(error).__name__}); start it or pass --broker"
        ) from None
    for db in range(1, 16):
        client = redis.Redis.from_url(f"{base}/{db}")
        if not client.set(REDIS_LOCK_KEY, token, nx=True, ex=ttl):
            client.close()
            continue
        try:
            _empty(client)
            yield f"{base}/{db}"
        finally:
            if client.get(REDIS_LOCK_KEY) == token.encode():
                _empty(client)
                client.delete(REDIS_LOCK_KEY)
            client.close()
        return
    raise HarnessError(f"no free Redis db number (1-15) on {base}; pass --broker")


def _empty(client: object) -> None:
    import redis

    assert isinstance(client, redis.Redis)
    for key in client.scan_iter(count=1000):
        if key != REDIS_LOCK_KEY.encode():
            client.delete(key)


@contextlib.contextmanager
def database_of_its_own(admin_url: str = LOCAL_PG_ADMIN, tag: str = "chaos") -> Iterator[str]:
    """The URL of a new PostgreSQL database ``toolsafe_<tag>_<hex>`` created through
    ``admin_url``; dropped afterwards."""
    import psycopg

    admin = admin_url.replace("postgresql+psycopg://", "postgresql://")
    name = f"toolsafe_{tag}_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        raise HarnessError(
            f"cannot create a database through {admin.rsplit('@', 1)[-1]} "
            f"({type(error).__name__}); start PostgreSQL or pass --database"
        ) from None
    try:
        yield admin.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0] + (
            f"/{name}"
        )
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
