"""The harness's pure parts: waiting, worker command lines, child environments, broker URL
checks, the partition's database URLs."""

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
from toolsafe.harness.proxy import database_addresses, through_proxies


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


@pytest.mark.parametrize(
    ("url", "servers", "proxied"),
    [
        (
            "postgresql+psycopg://postgres@db.example:6543/app",
            [("db.example", 6543)],
            "postgresql+psycopg://postgres@127.0.0.1:7001/app",
        ),
        (
            "postgresql://u:pw@127.0.0.1:5433,127.0.0.1:5434/chaos?target_session_attrs=read-write",
            [("127.0.0.1", 5433), ("127.0.0.1", 5434)],
            "postgresql://u:pw@127.0.0.1:7001,127.0.0.1:7002/chaos?target_session_attrs=read-write",
        ),
        (
            "postgresql://u@/app?host=a.example,b.example&port=5433,5434&sslmode=disable",
            [("a.example", 5433), ("b.example", 5434)],
            "postgresql://u@127.0.0.1:7001,127.0.0.1:7002/app?sslmode=disable",
        ),
        (
            "postgresql://u@a.example,[::1]:5499/app",
            [("a.example", 5432), ("::1", 5499)],
            "postgresql://u@127.0.0.1:7001,127.0.0.1:7002/app",
        ),
        (
            "postgresql://u@/app?host=a.example,b.example",
            [("a.example", 5432), ("b.example", 5432)],
            "postgresql://u@127.0.0.1:7001,127.0.0.1:7002/app",
        ),
    ],
)
def test_a_partition_puts_a_proxy_before_every_server_of_a_multi_host_url(
    url: str, servers: list[tuple[str, int]], proxied: str
) -> None:
    assert database_addresses(url) == servers
    assert through_proxies(url, [7001 + n for n in range(len(servers))]) == proxied


def test_a_multi_host_url_with_mismatched_ports_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="3 hosts and 2 ports"):
        database_addresses("postgresql://u@/app?host=a,b,c&port=1,2")
