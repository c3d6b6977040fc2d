"""The process harness itself, on real child processes (small Python programs) and the
session's real Redis db: readiness, early exits, stopping, SIGKILL of a whole process
group, respawns, waiting, the broker flush and the commands it builds."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest

from toolsafe.harness import (
    SESSION_LOCK_KEY,
    BrokerError,
    Fleet,
    HarnessError,
    ProcessStartError,
    WaitTimeout,
    WorkerOptions,
    child_env,
    flush_broker,
    free_port,
    spawn,
    stop_all,
    wait_until,
)

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('up', flush=True)\ntime.sleep(60)\n"
)
# Starts a grandchild in the same process group, like a prefork worker's pool.
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print('grandchild', child.pid, flush=True)\ntime.sleep(60)\n"
)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    """No such process any more, or only its zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_a_child_is_ready_when_it_prints_its_marker_and_stops_on_sigterm(tmp_path: Path) -> None:
    child = spawn("sleeper", python(SLEEPER), env={}, directory=tmp_path, ready_marker="up")
    assert child.wait_ready(20) >= 0
    assert child.alive() and child.text() == "up\n"
    assert (tmp_path / "sleeper.log").read_text() == "up\n"
    assert child.stop() == -signal.SIGTERM
    assert not child.alive() and child.returncode == -signal.SIGTERM


def test_a_child_that_exits_before_it_is_ready_is_reported_with_its_last_words(
    tmp_path: Path,
) -> None:
    child = spawn(
        "broken",
        python("import sys\nprint('no adapters', flush=True)\nsys.exit(3)\n"),
        env={},
        directory=tmp_path,
        ready_marker=" ready.",
    )
    with pytest.raises(ProcessStartError, match=r"broken exited \(code 3\)") as raised:
        child.wait_ready(20)
    assert "no adapters" in str(raised.value)
    assert isinstance(raised.value, HarnessError)


def test_a_child_that_never_says_it_is_ready_times_out(tmp_path: Path) -> None:
    with spawn("mute", python(SLEEPER), env={}, directory=tmp_path) as child:
        started = time.monotonic()
        silent = re.escape("mute did not print 'ready' within 0.3s")
        with pytest.raises(ProcessStartError, match=silent):
            child.wait_for_output("ready", 0.3)
        assert time.monotonic() - started < 10
        assert child.alive()
    assert child.returncode == -signal.SIGKILL  # leaving the block SIGKILLed it


def test_stop_sigkills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    child = spawn("stubborn", python(STUBBORN), env={}, directory=tmp_path)
    child.wait_for_output("up", 20)
    assert child.stop(grace=0.5) == -signal.SIGKILL


def test_kill_reaches_the_whole_process_group(tmp_path: Path) -> None:
    child = spawn("parent", python(PARENT), env={}, directory=tmp_path)
    grandchild = int(child.wait_for_output("grandchild", 20).split()[1])
    assert not gone(grandchild)
    child.kill()
    assert child.returncode == -signal.SIGKILL
    wait_until(lambda: gone(grandchild), 10, "the grandchild to die with its group")


def test_stop_all_signals_every_child_before_waiting(tmp_path: Path) -> None:
    children = [spawn(f"c{n}", python(SLEEPER), env={}, directory=tmp_path) for n in range(3)]
    for child in children:
        child.wait_for_output("up", 20)
    stop_all(children, grace=20)
    assert [child.returncode for child in children] == [-signal.SIGTERM] * 3


def test_a_fleet_respawns_its_dead_children_into_the_same_log(tmp_path: Path) -> None:
    fleet = Fleet()
    victim = fleet.add(spawn("victim", python(SLEEPER), env={}, directory=tmp_path))
    other = fleet.add(spawn("other", python(SLEEPER), env={}, directory=tmp_path))
    victim.wait_for_output("up", 20)
    other.wait_for_output("up", 20)
    assert fleet.restart_dead() == 0
    victim.kill()
    assert fleet.live() == [other]
    assert fleet.restart_dead() == 1
    fresh = fleet.processes[0]
    assert fresh is not victim and fresh.name == "victim" and fresh.alive()
    fresh.wait_for_output("up", 20)
    assert fresh.text() == "up\n"  # only its own output...
    assert (tmp_path / "victim.log").read_text() == "up\nup\n"  # ...appended to the log
    assert fleet.exits == [-signal.SIGKILL] and fleet.killed() == 1
    fleet.stop(grace=20)
    assert fleet.live() == []


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


def test_free_port_can_be_bound() -> None:
    import socket

    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        assert server.getsockname()[1] == port


def test_flush_broker_refuses_db_zero_and_non_redis_urls() -> None:
    for url in ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379", "amqp://guest@h//"):
        with pytest.raises(BrokerError, match="--broker must"):
            flush_broker(url)


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
