"""Shared fixtures: real PostgreSQL and Redis, isolated per test session.

Each session (and so each pytest-xdist worker: `make test` runs several) gets its own
PostgreSQL database (dropped at the end) and its own Redis database number (held by a
lock key); when every number 1-15 of the shared Redis is held (many runs on one machine),
the session starts a ``redis-server`` of its own on a free port instead. One rule for
every service a test needs (PostgreSQL, Redis, Chromium): missing, the test fails under
CI=true and skips elsewhere; `make test` installs or names what is missing before pytest
starts (.ci/prerequisites), so nothing skips there.

Under xdist (``--dist loadscope`` with the scopes of ``xdist_scope``) the tests of one
file run on one worker, so a module's cluster is started once, and the tests of ``SERIAL``
(marked ``serial``) share one work unit: one worker, one after another.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support import schedule
from tests.support.machine import Machine, cpu_times, measure, session_machine, speed_line
from toolsafe.harness import preload
from toolsafe.harness.broker import SESSION_LOCK_KEY

PG_ADMIN_URL = os.environ.get(
    "TOOLSAFE_TEST_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_HOST = os.environ.get("TOOLSAFE_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TOOLSAFE_TEST_REDIS_PORT", "6379"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# Tests that read /proc run wherever it exists, and always under CI (where a missing
# /proc fails them instead of skipping them).
needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/stat") and not IN_CI, reason="reads /proc"
)

# The store fixtures (a migrated PostgreSQL database and SQLite file per backend) serve
# tests/services and tests/processes alike.
pytest_plugins = ["tests.support.recovery.stores"]


def _under_coverage() -> bool:
    coverage = sys.modules.get("coverage")
    return coverage is not None and coverage.Coverage.current() is not None


# The harness's workers, beat and ``toolsafe`` commands fork from an interpreter that has
# imported Celery, SQLAlchemy and toolsafe once (toolsafe/harness/preload.py): a second
# of CPU saved per process, over a hundred processes per run on two cores. Not under
# coverage, whose children measure themselves from their own start.
if not _under_coverage():
    preload.enable()


TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "services", "processes")


# The tests that need the machine's cores more than any other: each starts a load of its
# own (hundreds of steps, several workers, real kills and restarts) that a second one at
# the same time would double on a two-core machine. Under xdist they share one work unit
# (one worker, one after another; ``xdist_scope``); marked ``serial`` for ``-m``.
SERIAL: dict[str, str] = {
    "processes/chaos/test_chaos.py": "300-step chaos runs with 3 workers, kills and restarts",
    "processes/pipeline/test_duplicates.py": "200 steps through 2 workers and 2 sweepers",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's kind, so ``-m "not processes"`` selects by it, and
    the tests of ``SERIAL`` as ``serial``; on an xdist worker, put the longest work units
    first (``tests/support/schedule.py``: the scheduler hands them out in this order)."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if parts and parts[0] in KINDS:
            item.add_marker(parts[0])
        if "/".join(parts) in SERIAL:
            item.add_marker(pytest.mark.serial)
    if hasattr(config, "workerinput"):
        items[:] = schedule.longest_first(items, xdist_scope, schedule.read_durations())


# ``TOOLSAFE_TEST_DURATIONS=tests/support/durations.json`` (``make test-durations``): the
# controller adds up each work unit's seconds and writes them there at the end.
_RECORDER = schedule.Recorder(lambda nodeid: xdist_scope(nodeid))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("TOOLSAFE_TEST_DURATIONS"):
        _RECORDER.add(report.nodeid, report.duration)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("TOOLSAFE_TEST_DURATIONS")
    if target and not hasattr(session.config, "workerinput") and _RECORDER.seconds:
        _RECORDER.write(Path(target))


# The machine's CPU at the controller's start: the summary says how busy the cores were,
# so a run's time can be read against the CPU work it needed (and what ran beside it),
# and how fast the cores were at the start and the end (the controller's own measure).
_CPU_AT_START = cpu_times()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        session_machine()  # the cores' speed at the start, for the summary


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    now = cpu_times()
    if _CPU_AT_START is not None and now is not None:
        terminalreporter.write_line(now.since(_CPU_AT_START))
    if not hasattr(terminalreporter.config, "workerinput"):
        terminalreporter.write_line(speed_line(session_machine(), measure()))


# Files whose tests share nothing costlier than the session's fixtures and are each long
# (a minute of benchmark programs, a 10^5-step store): each test is a work unit of its
# own, so their minutes spread over the workers instead of making one worker's tail.
PER_TEST: dict[str, str] = {
    "processes/test_benchmarks.py": "each test runs one benchmark program in a subprocess",
    "services/recovery/test_migration_events.py": "a 10^5-step store built per test",
}


def xdist_scope(nodeid: str) -> str:
    """The work unit of a test under ``make test``'s xdist: ``serial`` for the tests of
    ``SERIAL``, the test itself for those of ``PER_TEST``, else its file, so a module's
    cluster or servers start once, on one worker."""
    path = nodeid.split("::", 1)[0]
    name = path.removeprefix("tests/")
    if name in SERIAL:
        return "serial"
    return nodeid if name in PER_TEST else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadscope`` with the scopes of ``xdist_scope`` (the suite's own scheduler:
    xdist's ``loadgroup`` marks do not reach the scheduler under pytest 9)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # The units go out in the order the workers collected them: longest first
    # (``pytest_collection_modifyitems``), not xdist's most-tests-first.
    config.option.loadscopereorder = False
    scheduling = LoadScopeScheduling(config, log)
    scheduling._split_scope = xdist_scope  # its one documented point of variation
    return scheduling


def missing(service: str, reason: str) -> NoReturn:
    """The one rule for a service a test needs: fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{reason}; CI needs it (.ci/run installs and starts it)")
    pytest.skip(f"{reason} (make test installs or names it: .ci/prerequisites)")


def _missing(service: str, error: Exception) -> None:
    missing(service, f"{service} is not reachable ({type(error).__name__}: {error})")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session."""
    import psycopg

    admin = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    name = f"toolsafe_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as error:
        _missing("PostgreSQL", error)
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        # The session's database and the ones named after it (tests/support: reused
        # databases of the pipeline harness, a store's database).
        owned = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
            (name, name.replace("_", r"\_") + r"\_%"),
        ).fetchall()
        for (database,) in owned:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _hold_a_db(host: str, port: int, token: str) -> int | None:
    """A Redis db number (1-15) on host:port that no other session holds, now ours."""
    import redis

    for db in range(1, 16):
        client = redis.Redis(host=host, port=port, db=db)
        try:
            if client.set(SESSION_LOCK_KEY, token, nx=True, ex=3600):
                return db
        finally:
            client.close()
    return None


@dataclass(frozen=True)
class HeldRedis:
    """The Redis server a session's broker db lives on, and that db (held by ``token``)."""

    host: str
    port: int
    db: int
    token: str

    @property
    def server(self) -> str:
        return f"redis://{self.host}:{self.port}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeldRedis]:
    """A Redis db number held for this session: on the shared server, or (every number
    held by other sessions: many runs on one machine) on a ``redis-server`` of its own."""
    import redis

    from toolsafe.harness import HarnessError
    from toolsafe.harness.redis_server import RedisServer

    token = uuid.uuid4().hex
    try:
        probe = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=3)
        probe.ping()
        probe.close()
    except redis.RedisError as error:
        _missing("Redis", error)
    db = _hold_a_db(REDIS_HOST, REDIS_PORT, token)
    own: RedisServer | None = None
    if db is None:
        try:
            own = RedisServer(tmp_path_factory.mktemp("redis"))
            own.start()
        except HarnessError as error:
            pytest.fail(f"no free Redis db number (1-15) and no redis-server of its own: {error}")
        db = _hold_a_db("127.0.0.1", own.port, token)
        assert db is not None  # a new server: every number is free
    held = HeldRedis(
        REDIS_HOST if own is None else "127.0.0.1",
        REDIS_PORT if own is None else own.port,
        db,
        token,
    )
    try:
        yield held
    finally:
        client = redis.Redis(host=held.host, port=held.port, db=held.db)
        try:
            if client.get(SESSION_LOCK_KEY) == token.encode():
                client.delete(SESSION_LOCK_KEY)
        finally:
            client.close()
        if own is not None:
            own.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: HeldRedis) -> str:
    """URL of a Redis database number that no other test session holds."""
    from toolsafe.harness import flush_broker

    url = f"{redis_server.server}/{redis_server.db}"
    flush_broker(url)  # what an earlier, killed session left behind
    return url


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory per module for a cluster's logs, beat schedule and SQLite file."""
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="session")
def machine() -> Machine:
    """This session's machine factor (tests/support/machine.py): a time bound that is a
    feature is its base from the settings times this factor, named in its message."""
    return session_machine()
