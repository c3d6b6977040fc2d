"""What a chaos run runs on: the broker (a Redis server of its own when it restarts the
broker, else the one given or a free db on the local Redis) and the database (a primary
and standby of its own for failovers, else the one given or a new one on the local
PostgreSQL), each stopped or dropped when the run's stack closes; and the settings every
process of the run shares."""

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
from toolsafe.settings import child_environ


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


def run_env(config: ChaosConfig, workdir: Path, downstream_url: str) -> dict[str, str]:
    """The ``TOOLSAFE_*`` settings every process of the run shares: short leases and
    sweeps so that a killed worker's step is verified within seconds."""
    t = config.timing
    assert config.broker is not None and config.database is not None, "resolved by run()"
    return child_environ(
        {
            "TOOLSAFE_BROKER_URL": config.broker,
            "TOOLSAFE_DATABASE_URL": config.database,
            "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
            "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream_url,
            "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": str(t.consistency_window),
            "TOOLSAFE_EXAMPLE_TIMEOUT": str(t.call_timeout),
            "TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY": "true" if config.deduplicating else "false",
            "TOOLSAFE_SUBMIT_HINTS": "relay" if config.relay else "direct",
            "TOOLSAFE_TASK_SOFT_TIME_LIMIT": str(t.time_limit - 1),
            "TOOLSAFE_TASK_TIME_LIMIT": str(t.time_limit),
            # Short: a live call's heartbeat renews it (every 0.6 s), a dead one's ends soon.
            "TOOLSAFE_LEASE_SECONDS": "3",
            "TOOLSAFE_SWEEP_INTERVAL": "0.5",
            # A hint lost without the broker losing its data (held by a SIGKILLed worker
            # until the visibility timeout) is re-sent after this. The sweeper re-sends
            # none while hints wait in the broker (tasks/sweeper.py), so a short value
            # piles nothing onto a queue being drained; it only ends the run's tail sooner.
            "TOOLSAFE_REPUBLISH_AFTER": "5",
            # Below the retry and lookup delays (up to 2 s): most of them are parked in
            # the store and sent by the release timer, so its path is under the faults too.
            "TOOLSAFE_MAX_ETA": "1",
            "TOOLSAFE_VISIBILITY_TIMEOUT": "150",
            "TOOLSAFE_RETRY_BASE_DELAY": "0.2",
            "TOOLSAFE_RETRY_MAX_DELAY": "2",
            "TOOLSAFE_VERIFY_BASE_DELAY": "0.3",
            "TOOLSAFE_VERIFY_MAX_DELAY": "1.5",
            "TOOLSAFE_FAULTS_ENABLED": "1",
            "TOOLSAFE_FAULT_PLAN": str(workdir / "fault-plan.json"),
            "TOOLSAFE_FAULT_STATE_DIR": str(workdir / "fired"),
        }
    )
