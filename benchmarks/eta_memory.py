"""Worker memory while steps wait to retry: RSS with 10^3 and 10^5 steps waiting.

``python -m benchmarks.eta_memory`` runs its own ``redis-server`` (a held backlog is
large: the shared one is not filled) and a PostgreSQL database of its own. For each
backlog size it puts that many steps in ``waiting_retry``, due ``--delay`` seconds
ahead and not yet published (what a burst of rate-limited calls leaves in the store),
starts beat (the release timer) and a toolsafe worker (prefork x2), waits until the
broker's queue stops changing, and reads the resident memory of the worker's
processes. Then it submits one step due now and times it to ``succeeded``: whether
held ETA messages keep due work waiting behind them.

Two modes, each at every size:

- ``parked`` (``TOOLSAFE_MAX_ETA`` 10, the default): the delays stay in the store
  until they come within 10 s of their due time; the worker holds none of them.
- ``held`` (``TOOLSAFE_MAX_ETA`` 600, the default before delays were parked): the
  release timer sends every hint at once as an ETA message, and the worker takes them
  into memory up to ``worker_eta_task_limit``.

It prints RSS growth between the sizes against the target (<= 10 %), met or not, for
the default mode.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import redis

from benchmarks.common import (
    BenchDatabase,
    BenchError,
    add_service_options,
    header,
    load_average,
    run_main,
    start_beat,
    start_worker,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import EXECUTE_QUEUE, QUEUES, RECOVERY_QUEUE
from toolsafe.harness import Process
from toolsafe.harness.redis_server import RedisServer
from toolsafe.recovery.schema import steps
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

GROWTH_TARGET: Final = 0.10
MODES: Final = {"parked": 10.0, "held": 600.0}  # TOOLSAFE_MAX_ETA of each mode
TEMPLATE: Final = "eta-template"


def rss_kib(pid: int) -> int:
    """VmRSS of one process, in KiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


def group_rss_kib(worker: Process) -> int:
    """The worker's main process and its pool children."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == worker.pid:  # the process group (the worker leads its own)
            total += rss_kib(int(status.parent.name))
    return total


def park_backlog(env: dict[str, str], database: BenchDatabase, count: int, delay: float) -> None:
    """``count`` steps waiting to retry ``delay`` s ahead, no hint out for them: one real
    submission copied ``count`` times in one statement (a burst through the workers
    would take minutes at 10^5), then moved to ``waiting_retry``."""
    client = Client(create_app(Settings.from_env(env)))
    try:
        client.submit(TOOL, {"n": 0, "call_ms": 0}, operation_ref=TEMPLATE)
    finally:
        client.close()
    columns = [column.name for column in steps.c if column.name not in ("id", "operation_ref")]
    listed = ", ".join(columns)
    due = datetime.now(UTC) + timedelta(seconds=delay)
    with database.connect() as conn:
        conn.execute("DELETE FROM step_events")
        conn.execute("DELETE FROM steps WHERE operation_ref <> %s", (TEMPLATE,))
        conn.execute(
            f"INSERT INTO steps (operation_ref, {listed}) "  # noqa: S608 - the model's columns
            f"SELECT 'eta/' || n, {listed} FROM steps, generate_series(1, %s) AS n "
            "WHERE operation_ref = %s",
            (count, TEMPLATE),
        )
        conn.execute(
            "UPDATE steps SET state = 'waiting_retry', commit_state = 'not_committed', "
            "attempts = 1, due_at = %s, published_at = NULL WHERE operation_ref LIKE 'eta/%%'",
            (due,),
        )
        conn.execute("DELETE FROM steps WHERE operation_ref = %s", (TEMPLATE,))


def waiting(client: redis.Redis) -> int:
    """Hints waiting in the broker: a released retry goes in the recovery lane, a new
    submission in the execute queue."""
    return int(client.llen(EXECUTE_QUEUE)) + int(client.llen(RECOVERY_QUEUE))


def published(database: BenchDatabase) -> int:
    with database.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM steps WHERE operation_ref LIKE 'eta/%%' "
            "AND published_at IS NOT NULL"
        ).fetchone()
    return int(str(row[0])) if row else 0


def settled(client: redis.Redis, database: BenchDatabase, seconds: float, timeout: float) -> None:
    """Until the queues' length and the released count stopped changing for ``seconds``."""
    deadline = time.monotonic() + timeout
    last, since = (-1, -1), time.monotonic()
    while time.monotonic() < deadline:
        now = (waiting(client), published(database))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        time.sleep(0.3)


@dataclass
class Measured:
    mode: str
    size: int
    rss_kib: int
    released: int  # hints the release timer sent
    taken: int  # of those, held by the worker (delivered, not acknowledged)
    waited: float | None  # a step due now, to succeeded; None: still waiting


def measure(
    mode: str,
    size: int,
    args: argparse.Namespace,
    server: RedisServer,
    database: BenchDatabase,
    tmp: Path,
) -> Measured:
    broker = server.url(1)
    client = redis.Redis.from_url(broker)
    client.flushdb()  # the run's own server
    env = worker_env(broker, database.url, {"TOOLSAFE_MAX_ETA": str(MODES[mode])})
    park_backlog(env, database, size, args.delay)
    client.flushdb()  # the template's own hint
    worker = start_worker("toolsafe", list(QUEUES), env=env, directory=tmp, name=f"eta{size}")
    beat = start_beat("toolsafe", env=env, directory=tmp)
    with worker, beat:
        worker.wait_ready()
        beat.wait_ready()
        time.sleep(args.settle)  # a few ticks of the release timer
        settled(client, database, args.settle, 180)
        rss = group_rss_kib(worker)
        released = published(database)
        taken = released - waiting(client)
        submitter = Client(create_app(Settings.from_env(env)))
        ref = f"eta-due/{uuid.uuid4().hex[:8]}"
        try:
            started = time.monotonic()
            submitter.submit(TOOL, {"n": 1, "call_ms": 0}, operation_ref=ref)
            waited: float | None = None
            while time.monotonic() - started < args.due_timeout:
                if submitter.runtime.store.get(ref).state.value == "succeeded":
                    waited = time.monotonic() - started
                    break
                time.sleep(0.05)
        finally:
            submitter.close()
    client.close()
    return Measured(mode, size, rss, released, taken, waited)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.eta_memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="1000,100000", help="backlog sizes, small first")
    parser.add_argument("--delay", type=float, default=300.0, help="their due time, seconds ahead")
    parser.add_argument(
        "--modes", default="parked,held", help=f"of {','.join(MODES)}; the first is the target's"
    )
    parser.add_argument("--due-timeout", type=float, default=15.0)
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds the queue must stay unchanged"
    )
    add_service_options(parser)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if len(sizes) < 2 or any(size < 1 for size in sizes):
        raise BenchError("--sizes needs at least two positive sizes")
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        raise BenchError(f"--modes takes {', '.join(MODES)}, got {args.modes!r}")
    header(
        f"worker memory with steps waiting to retry: sizes {sizes}, due +{args.delay:g}s, "
        f"modes {modes} (TOOLSAFE_MAX_ETA {', '.join(f'{m} {MODES[m]:g}' for m in modes)})"
    )
    results: list[Measured] = []
    with (
        tempfile.TemporaryDirectory(prefix="toolsafe-eta-") as tmp,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        server = RedisServer(Path(tmp))
        server.start()
        try:
            for mode in modes:
                for size in sizes:
                    found = measure(mode, size, args, server, database, Path(tmp))
                    results.append(found)
                    shown = "still waiting" if found.waited is None else f"{found.waited:.2f}s"
                    print(
                        f"{mode:>6} backlog {size:>7}: worker RSS {found.rss_kib / 1024:7.1f} MiB,"
                        f" {found.released} hints released, {found.taken} held by the worker;"
                        f" a step due now succeeded after {shown}  load {load_average()}",
                        flush=True,
                    )
        finally:
            server.stop()
    print("\ntargets:")
    for mode in modes:
        rows = [found for found in results if found.mode == mode]
        small, large = rows[0], rows[-1]
        growth = large.rss_kib / small.rss_kib - 1
        verdict = "met" if growth <= GROWTH_TARGET else "NOT met"
        target = f"  (target <= {GROWTH_TARGET * 100:.0f} %)  {verdict}" if mode == modes[0] else ""
        grew = f"{growth * 100:+5.1f} %"
        print(f"  {mode}: RSS growth {small.size} -> {large.size} waiting  {grew}{target}")
        shown = "stalled" if large.waited is None else f"{large.waited:.2f}s"
        print(f"  {mode}: a step due now behind {large.size} waiting   {shown}")
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
