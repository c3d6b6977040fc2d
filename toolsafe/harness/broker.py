"""The broker side of the harness: which Redis db a run may clear, and clearing it the
way a Redis restart without persistence would."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from toolsafe.harness.errors import BrokerError

# The key a test session (tests/conftest.py) or a benchmark run sets in the Redis db it
# holds, so that runs sharing one Redis server keep out of each other's db. A flush of
# the held db leaves it in place.
SESSION_LOCK_KEY: Final = "toolsafe-test-session-lock"


def redis_db(url: str) -> int:
    """The db number of a ``redis://host:port/N`` URL (0 when absent)."""
    path = urlsplit(url).path.strip("/")
    return int(path) if path else 0


def check_broker(url: str) -> int:
    """The db number of ``url`` if it is a Redis db other than 0 (a run deletes every key
    in it, so never the default db); ``BrokerError`` otherwise."""
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss"):
        raise BrokerError(f"--broker must be a redis:// URL, got {scheme}://")
    try:
        number = redis_db(url)
    except ValueError:
        raise BrokerError(f"--broker {url!r} names no db number") from None
    if number == 0:
        raise BrokerError(
            "--broker must name a dedicated Redis db other than 0 (e.g. redis://host:6379/9): "
            "the run deletes every key in it"
        )
    return number


def flush_broker(url: str, keep: Iterable[str] = (SESSION_LOCK_KEY,)) -> int:
    """Delete every key of the broker's db (queues, unacknowledged messages, held ETAs)
    but ``keep``, key by key (never FLUSHDB): what a Redis restart without persistence
    does to it. Refuses a URL ``check_broker`` refuses. Returns the keys deleted."""
    import redis

    check_broker(url)
    kept = {key.encode() for key in keep}
    client = redis.Redis.from_url(url)
    deleted = 0
    try:
        doomed = [key for key in client.scan_iter(count=1000) if key not in kept]
        for start in range(0, len(doomed), 500):
            deleted += int(client.delete(*doomed[start : start + 500]))
    finally:
        client.close()
    return deleted
