"""What a chaos run runs on: the broker (a Redis server of its own when it restarts the
broker, else the one given or a free db on the local Redis) and the database (a primary
and standby of its own for failovers, else the one given or a new one on the local
PostgreSQL), each stopped or dropped when the run's stack closes."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from toolsafe.chaos.failover import replicated_database
from toolsafe.chaos.report import ChaosConfig
from toolsafe.harness import HarnessError
from toolsafe.harness.local import REDIS_LOCK_KEY, database_of_its_own, redis_db_of_its_own
from toolsafe.harness.redis_server import RedisServer
from toolsafe.harness.replicated import ReplicatedPostgres


def resources(
    config: ChaosConfig, workdir: Path, stack: contextlib.ExitStack
) -> tuple[ChaosConfig, RedisServer | None, ReplicatedPostgres | None]:
    """The broker and database the run uses: a Redis server of its own when it restarts
    the broker, else the one given or a free db on the local Redis; the database given
    or a new one on the local PostgreSQL (dropped afterwards)."""
    server: RedisServer | None = None
    broker, database, keep = config.broker, config.database, config.keep_keys
    if config.size.redis_restarts:
        if broker is not None:
            raise HarnessError(
                "--redis-restarts restarts a Redis server of the run's own; leave out --broker"
            )
        server = RedisServer(workdir)
        server.start()
        stack.callback(server.stop)
        broker = server.url(1)
    elif broker is None:
        broker = stack.enter_context(redis_db_of_its_own(config.local_redis))
        keep = (*keep, REDIS_LOCK_KEY)
    pair = None
    if config.size.failovers:
        database, pair = replicated_database(stack, database)
    if database is None:
        database = stack.enter_context(database_of_its_own(config.pg_admin))
    return replace(config, broker=broker, database=database, keep_keys=keep), server, pair
