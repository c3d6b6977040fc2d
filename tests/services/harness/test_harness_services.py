"""The harness against real services: a free port binds, and flushing a broker keeps only
the kept keys."""

from __future__ import annotations

import pytest

from toolsafe.harness import (
    SESSION_LOCK_KEY,
    flush_broker,
    free_port,
)


def test_free_port_can_be_bound() -> None:
    import socket

    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        assert server.getsockname()[1] == port


@pytest.mark.redis
def test_flush_broker_deletes_every_key_but_the_kept_ones(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        lock = client.get(SESSION_LOCK_KEY)
        assert lock is not None  # conftest holds the db
        flush_broker(redis_url)  # what earlier tests of the session left behind
        assert list(client.scan_iter()) == [SESSION_LOCK_KEY.encode()]
        client.rpush("toolsafe.execute", *[f"hint{n}" for n in range(1200)])
        client.hset("unacked", "tag", "message")
        client.set("kept-too", "1")
        assert flush_broker(redis_url, keep=(SESSION_LOCK_KEY, "kept-too")) == 2
        assert sorted(client.scan_iter()) == sorted([SESSION_LOCK_KEY.encode(), b"kept-too"])
        assert flush_broker(redis_url) == 1  # by default only the session's lock stays
        assert client.get(SESSION_LOCK_KEY) == lock
    finally:
        client.close()
