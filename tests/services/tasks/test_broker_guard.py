"""toolsafe's Redis transport guard (``toolsafe.broker.redis``): a channel whose
transport kombu detached raises a connection error (which kombu's cleanup ignores)
instead of the ``AttributeError`` that killed workers on a Redis restart."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kombu.connection import Connection

from toolsafe import celeryconfig
from toolsafe.broker.redis import DetachedTransport, Transport


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/3", "toolsafe.broker.redis:Transport"),
        ("rediss://cache.internal:6380/0", "toolsafe.broker.redis:Transport"),
        ("filesystem:///tmp/broker", "toolsafe.broker.filesystem:Transport"),
        ("amqp://guest@127.0.0.1:5672//", None),
    ],
)
def test_the_broker_url_picks_the_guarded_transport(url: str, transport: str | None) -> None:
    assert celeryconfig.broker_transport(url) == transport


@pytest.mark.redis
def test_closing_a_channel_of_a_detached_transport_with_unacked_messages(redis_url: str) -> None:
    queue = f"guard-{uuid.uuid4().hex[:8]}"
    # kombu ships no type hints: its objects are Any here.
    connection: Any = Connection(redis_url, transport=Transport)  # type: ignore[no-untyped-call]
    try:
        channel: Any = connection.default_channel
        channel.queue_declare(queue=queue)
        channel.basic_publish(channel.prepare_message("hint"), exchange="", routing_key=queue)
        message = channel.basic_get(queue, no_ack=False)
        assert message is not None  # delivered, not acknowledged: the channel holds it
        # What Connection.collect() leaves behind after a connection loss.
        transport = connection.transport
        transport.client = None
        with pytest.raises(DetachedTransport):
            channel._connparams()
        assert isinstance(DetachedTransport("x"), connection.connection_errors)
        # kombu's own cleanup path: the guard's error is one it ignores.
        connection.maybe_close_channel(channel)
        assert channel.closed
    finally:
        connection._transport = None  # detached on purpose; nothing left to close
        import redis

        client = redis.Redis.from_url(redis_url)
        client.delete(queue)
        client.close()
