"""Shared fixtures: real PostgreSQL and Redis, isolated per test session.

Each session gets its own PostgreSQL database (dropped at the end) and its own Redis
database number (held by a lock key), so several runs can share one machine. When a
service is missing the tests that need it fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get(
    "TOOLSAFE_TEST_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_HOST = os.environ.get("TOOLSAFE_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TOOLSAFE_TEST_REDIS_PORT", "6379"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# The store fixtures (a migrated PostgreSQL database and SQLite file per backend) serve
# tests/services and tests/processes alike.
pytest_plugins = ["tests.support.recovery.stores"]


TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "services", "processes")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's kind, so ``-m "not processes"`` selects by it."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if parts and parts[0] in KINDS:
            item.add_marker(parts[0])


def _missing(service: str, error: Exception) -> None:
    message = f"{service} is not reachable ({type(error).__name__}: {error})"
    if IN_CI:
        pytest.fail(f"{message}; CI needs it, .ci/run should have started it")
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session."""
    import psycopg

    admin = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    name = f"toolsafe_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as error:
        _missing("PostgreSQL", error)
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        # The session's database and the ones named after it (tests/support: reused
        # databases of the pipeline harness, a store's database).
        owned = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
            (name, name.replace("_", r"\_") + r"\_%"),
        ).fetchall()
        for (database,) in owned:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a Redis database number that no other test session holds."""
    import redis

    from toolsafe.harness import SESSION_LOCK_KEY, flush_broker

    token = uuid.uuid4().hex
    try:
        probe = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=3)
        probe.ping()
    except redis.RedisError as error:
        _missing("Redis", error)
    for db in range(1, 16):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)
        if client.set(SESSION_LOCK_KEY, token, nx=True, ex=3600):
            url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
            flush_broker(url)  # what an earlier, killed session left behind
            try:
                yield url
            finally:
                if client.get(SESSION_LOCK_KEY) == token.encode():
                    client.delete(SESSION_LOCK_KEY)
            return
    pytest.fail("no free Redis database number (1-15) for this test session")


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory per module for a cluster's logs, beat schedule and SQLite file."""
    return tmp_path_factory.mktemp("pipeline")
