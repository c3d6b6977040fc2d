"""One process harness for the demo, the chaos run, the tests and the benchmarks: real
``celery worker``/``beat`` and downstream subprocesses, broker and database faults, a
fault proxy that partitions one process, waiting on conditions, free ports. See
docs/harness.md."""

from toolsafe.harness.broker import SESSION_LOCK_KEY, check_broker, flush_broker, redis_db
from toolsafe.harness.database import kill_db_connections, restart_database
from toolsafe.harness.downstream import DownstreamProcess
from toolsafe.harness.errors import BrokerError, HarnessError, ProcessStartError, WaitTimeout
from toolsafe.harness.ports import free_port
from toolsafe.harness.processes import (
    Fleet,
    Process,
    child_env,
    cpu_seconds,
    group_cpu_seconds,
    spawn,
    stop_all,
)
from toolsafe.harness.proxy import FaultProxy, Partition
from toolsafe.harness.replicated import ReplicatedPostgres, replicated_postgres
from toolsafe.harness.waiting import wait_until
from toolsafe.harness.workers import (
    BEAT_READY,
    WORKER_READY,
    WorkerOptions,
    celery_command,
    start_beat,
    start_worker,
    toolsafe_command,
)

__all__ = [
    "BEAT_READY",
    "SESSION_LOCK_KEY",
    "WORKER_READY",
    "BrokerError",
    "DownstreamProcess",
    "FaultProxy",
    "Fleet",
    "HarnessError",
    "Partition",
    "Process",
    "ProcessStartError",
    "ReplicatedPostgres",
    "WaitTimeout",
    "WorkerOptions",
    "celery_command",
    "check_broker",
    "child_env",
    "cpu_seconds",
    "flush_broker",
    "free_port",
    "group_cpu_seconds",
    "kill_db_connections",
    "redis_db",
    "replicated_postgres",
    "restart_database",
    "spawn",
    "start_beat",
    "start_worker",
    "stop_all",
    "toolsafe_command",
    "wait_until",
]
