"""Worker memory while steps wait to retry: RSS with 10^3 and 10^5 retry hints pending.

``python -m benchmarks.eta_memory`` runs its own ``redis-server`` (the backlog is large:
the shared one is not filled) and a PostgreSQL database of its own. For each backlog
size it publishes that many execute hints with an ETA ``--delay`` seconds ahead (what
``Publisher`` sends for a step in ``waiting_retry`` due within ``TOOLSAFE_MAX_ETA``),
starts a toolsafe worker (prefork x2), waits until it stops taking messages, and reads
the resident memory of its processes. Then it submits one step due now and times it to
``succeeded``: whether held ETA messages keep due work waiting behind them.

It prints RSS growth between the sizes against the target (<= 10 %), met or not.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Sequence
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
    start_worker,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import EXECUTE_QUEUE, EXECUTE_TASK, QUEUES
from toolsafe.harness import Process
from toolsafe.harness.redis_server import RedisServer
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

GROWTH_TARGET: Final = 0.10
PUBLISH_BATCH: Final = 500


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


def publish_backlog(env: dict[str, str], count: int, delay: float) -> None:
    app = create_app(Settings.from_env(env))
    eta = datetime.now(UTC) + timedelta(seconds=delay)
    try:
        with app.producer_or_acquire() as producer:
            for start in range(0, count, PUBLISH_BATCH):
                with producer.batch(2 * PUBLISH_BATCH):
                    for n in range(start, min(start + PUBLISH_BATCH, count)):
                        app.send_task(EXECUTE_TASK, args=(f"eta/{n}",), eta=eta, producer=producer)
    finally:
        app.close()


def settled(client: redis.Redis, seconds: float, timeout: float) -> None:
    """Until the queue's length stopped changing for ``seconds``."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        held = int(client.llen(EXECUTE_QUEUE))
        if held != last:
            last, since = held, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        time.sleep(0.2)


def measure(
    size: int, args: argparse.Namespace, server: RedisServer, database: BenchDatabase, tmp: Path
) -> tuple[int, int, float | None]:
    """(RSS KiB with the backlog, messages the worker took, seconds for a due step)."""
    broker = server.url(1)
    client = redis.Redis.from_url(broker)
    client.flushdb()  # the run's own server
    env = worker_env(broker, database.url, {"TOOLSAFE_MAX_ETA": str(args.max_eta)})
    publish_backlog(env, size, args.delay)
    worker = start_worker("toolsafe", list(QUEUES), env=env, directory=tmp, name=f"eta{size}")
    with worker:
        worker.wait_ready()
        settled(client, 3.0, 120)
        rss = group_rss_kib(worker)
        taken = size - int(client.llen(EXECUTE_QUEUE))
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
    return rss, taken, waited


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.eta_memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="1000,100000", help="backlog sizes, small first")
    parser.add_argument("--delay", type=float, default=300.0, help="the hints' ETA, seconds")
    parser.add_argument("--max-eta", type=float, default=600.0, help="TOOLSAFE_MAX_ETA")
    parser.add_argument("--due-timeout", type=float, default=15.0)
    add_service_options(parser)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if len(sizes) < 2 or any(size < 1 for size in sizes):
        raise BenchError("--sizes needs at least two positive sizes")
    header(
        f"worker memory with retry hints waiting: sizes {sizes}, ETA +{args.delay:g}s, "
        f"TOOLSAFE_MAX_ETA {args.max_eta:g}"
    )
    results: list[tuple[int, int, int, float | None]] = []
    with (
        tempfile.TemporaryDirectory(prefix="toolsafe-eta-") as tmp,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        server = RedisServer(Path(tmp))
        server.start()
        try:
            for size in sizes:
                rss, taken, waited = measure(size, args, server, database, Path(tmp))
                results.append((size, rss, taken, waited))
                shown = "still waiting" if waited is None else f"{waited:.2f}s"
                print(
                    f"backlog {size:>7}: worker RSS {rss / 1024:7.1f} MiB, took {taken} hints "
                    f"into memory; a step due now succeeded after {shown}  load {load_average()}",
                    flush=True,
                )
        finally:
            server.stop()
    small, large = results[0], results[-1]
    growth = large[1] / small[1] - 1
    print("\ntargets:")
    verdict = "met" if growth <= GROWTH_TARGET else "NOT met"
    print(
        f"  RSS growth {small[0]} -> {large[0]} waiting  {growth * 100:+5.1f} %  "
        f"(target <= {GROWTH_TARGET * 100:.0f} %)  {verdict}"
    )
    blocked = large[3] is None
    print(
        f"  due work behind {large[0]} held hints     "
        f"{'stalled' if blocked else f'{large[3]:.2f}s'}  (not a target; the cost of ETAs)"
    )
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
