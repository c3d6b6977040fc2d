"""The harness's pure parts: waiting, worker command lines, child environments, broker URL
checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolsafe.harness import (
    BrokerError,
    HarnessError,
    WaitTimeout,
    WorkerOptions,
    child_env,
    flush_broker,
    wait_until,
)


def test_wait_until_returns_once_true_and_names_what_timed_out() -> None:
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) >= 3

    wait_until(third_time, 10, "the third call", interval=0.001)
    assert len(calls) == 3
    with pytest.raises(WaitTimeout, match=re.escape("after 0.05s waiting for the moon\nlogs here")):
        wait_until(lambda: False, 0.05, "the moon", interval=0.01, context=lambda: "logs here")
    assert issubclass(WaitTimeout, TimeoutError) and issubclass(WaitTimeout, HarnessError)


def test_worker_commands() -> None:
    toolsafe = WorkerOptions(name="w1", pool="solo", without=())
    assert toolsafe.argv()[1:] == [
        "-m", "toolsafe", "worker", "--", "-P", "solo", "-n", "w1@%h", "-l", "INFO",
    ]  # fmt: skip
    plain = WorkerOptions(
        name="b", app="benchmarks.baseline", queues=("q1", "q2"), concurrency=2, node="n",
        loglevel="WARNING", without=("mingle", "gossip"), beat_schedule=Path("/s"),
    )  # fmt: skip
    assert plain.argv()[1:] == [
        "-m", "celery", "-A", "benchmarks.baseline", "worker", "-Q", "q1,q2", "-P", "prefork",
        "-n", "n@%h", "-l", "WARNING", "-c", "2", "--without-mingle", "--without-gossip",
        "-B", "-s", "/s",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="needs its queues"):
        WorkerOptions(name="x", app="some.app").argv()
    with pytest.raises(ValueError, match="every toolsafe queue"):
        WorkerOptions(name="x", queues=("q",)).argv()


def test_child_env_drops_inherited_toolsafe_settings() -> None:
    base = {"PATH": "/bin", "TOOLSAFE_METRICS_PORT": "9", "TOOLSAFE_BROKER_URL": "redis://old"}
    env = child_env({"TOOLSAFE_BROKER_URL": "redis://new"}, base)
    assert env == {"PATH": "/bin", "TOOLSAFE_BROKER_URL": "redis://new"}


def test_flush_broker_refuses_db_zero_and_non_redis_urls() -> None:
    for url in ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379", "amqp://guest@h//"):
        with pytest.raises(BrokerError, match="--broker must"):
            flush_broker(url)
