"""kombu's Redis transport with a guard that keeps a worker alive across a hard broker
restart (``kill -9`` of redis-server, started again).

The fault (Celery 5.7, kombu 5.7): on a connection loss the consumer calls
``Connection.collect()`` and then ``Connection.close()``. When the channel's close inside
``collect()`` fails on the dead socket, ``collect()`` still detaches the transport
(``transport.client = None``) but keeps the half-closed default channel, and ``close()``
closes it again. If the worker holds unacknowledged messages (every ETA message it
keeps in memory, a prefetched one), the channel then restores them: it builds a new
connection pool from ``transport.client.hostname`` and raises ``AttributeError``, which
kombu's cleanup (``ignore_errors``) does not catch, so Celery reports an "Unrecoverable
error" and the worker's main process exits. It has nothing to do with
``worker_cancel_long_running_tasks_on_connection_loss``: the crash happens before the
consumer looks at that setting.

The guard: a channel whose transport was detached has no broker to talk to, so asking it
for a connection raises ``redis.ConnectionError``, the error every kombu cleanup path
ignores. The consumer then reconnects as it does after any other connection loss. The
messages it could not restore are not lost to toolsafe: on a broker that survived they
sit in the unacked hash and come back after ``visibility_timeout``; after a restart
without persistence they are gone, and the sweeper re-publishes their steps from the
database once they are due (R1, R6, R7).
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis


class DetachedTransport(redis.exceptions.ConnectionError):
    """The channel's transport was closed (``transport.client`` is None)."""


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise DetachedTransport("the broker connection of this channel was closed")
        # kombu ships no type hints.
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    Channel = Channel
