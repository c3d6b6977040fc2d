"""End-to-end throughput: N tool calls through toolsafe against plain Celery.

``python -m benchmarks.throughput --steps 2000`` runs the same N calls three ways on the
same pool and concurrency: a plain no-op task, a hand-rolled task (INSERT+commit, a 1 ms
call, UPDATE+commit) and toolsafe (submit, claim, the no-op ``bench_write`` adapter with
the same 1 ms call, record). Each is measured twice: end to end (the client submits while
the worker runs) and as a drain (the queue filled first, then the worker let loose).

``--store sqlite`` runs toolsafe on a SQLite file of its own (the embedded store, a fresh
file per run, migrated first) instead of PostgreSQL; the plain-Celery modes stay on
PostgreSQL, and toolsafe's database CPU is then inside the worker's (shown as 0).

``--modes noop,rows,toolsafe,relay`` adds toolsafe with ``TOOLSAFE_SUBMIT_HINTS=relay``
(the submit is its commit; the worker's hint relay publishes the hint) and prints its
ratios beside the default's.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from celery import Celery

from benchmarks import baseline
from benchmarks.common import (
    POLL,
    RELAY,
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    backend_cpu_seconds,
    header,
    load_average,
    run_main,
    start_worker,
    wait_worker_ready,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import EXECUTE_QUEUE, QUEUES
from toolsafe.harness import Process, cpu_seconds, wait_until
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

MODES: Final = ("noop", "rows", "toolsafe", "relay")
DEFAULT_MODES: Final = ("noop", "rows", "toolsafe")
TOOLSAFE_MODES: Final = ("toolsafe", "relay")
LABELS: Final = {
    "noop": "plain Celery, no-op task",
    "rows": "plain Celery, INSERT / call / UPDATE",
    "toolsafe": "toolsafe, bench_write adapter",
    "relay": "toolsafe, the hint relay",
}


@dataclass(frozen=True)
class Run:
    mode: str
    steps: int
    e2e_seconds: float
    submit_seconds: float
    drain_seconds: float
    worker_cpu: float
    database_cpu: float
    ready_seconds: float
    # Of ``worker_cpu``, the worker's main process (Celery's consumer: fetching, acks,
    # task events); the rest is its pool processes'.
    worker_main_cpu: float = 0.0
    drain_wal_bytes: float = 0.0  # PostgreSQL WAL written during the drain (0 on SQLite)

    @property
    def e2e_rate(self) -> float:
        return self.steps / self.e2e_seconds

    @property
    def drain_rate(self) -> float:
        return self.steps / self.drain_seconds


class Target:
    """One way of running the calls: its worker, its submit and its completion check."""

    def __init__(
        self, mode: str, env: dict[str, str], call_ms: float, sqlite_file: Path | None = None
    ) -> None:
        self.mode = mode
        self.call_ms = call_ms
        self.sqlite_file = sqlite_file  # toolsafe's store when it is SQLite
        settings = Settings.from_env(env)
        self.client: Client | None = None
        self.app: Celery
        if mode in TOOLSAFE_MODES:
            self.app_name, self.queues = "toolsafe", list(QUEUES)
            self.consume_queue = EXECUTE_QUEUE
            self.client = Client(create_app(settings))
            self.app = self.client.app
        else:
            self.app_name, self.queues = "benchmarks.baseline", [baseline.QUEUE]
            self.consume_queue = baseline.QUEUE
            self.app = baseline.create_app(settings)

    def submit(self, ref: str, n: int) -> None:
        if self.client is not None:
            self.client.submit(TOOL, {"n": n, "call_ms": self.call_ms}, operation_ref=ref)
        elif self.mode == "rows":
            self.app.send_task(baseline.ROWS_TASK, args=(ref, self.call_ms))
        else:
            self.app.send_task(baseline.NOOP_TASK)

    def done_count(self, database: BenchDatabase, prefix: str) -> int | None:
        """How many calls of this batch finished, by the database (None: nothing to read)."""
        if self.mode == "noop":
            return None
        table, done = (
            ("steps", "succeeded") if self.mode in TOOLSAFE_MODES else ("bench_calls", "done")
        )
        if self.sqlite_file is not None:
            with sqlite3.connect(self.sqlite_file, timeout=30) as lite:
                row = lite.execute(
                    "SELECT count(*) FROM steps WHERE state = ? AND operation_ref LIKE ?",
                    (done, prefix + "%"),
                ).fetchone()
            lite.close()
            count = row[0] if row else 0
            assert isinstance(count, int)
            return count
        with database.connect() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {table} WHERE state = %s AND operation_ref LIKE %s",  # noqa: S608 - fixed names
                (done, prefix + "%"),
            ).fetchone()
        count = row[0] if row else 0
        assert isinstance(count, int)
        return count

    def stop(self, destination: list[str]) -> None:
        """The worker stops consuming every queue of this mode (each cancel answered)."""
        for queue in self.queues:
            reply = self.app.control.cancel_consumer(
                queue, destination=destination, reply=True, timeout=10
            )
            if not reply:
                raise BenchError(f"the {self.mode} worker did not answer cancel_consumer")

    def resume(self, destination: list[str]) -> None:
        """The worker consumes again, the calls' queue first. Every queue was stopped: a
        worker still blocked in BRPOP on other queues would take up a queue added back
        only at its next BRPOP, up to kombu's ``brpop_timeout`` (1 s) later, while a
        worker with no queue left starts one at once (the baseline's single queue)."""
        others = (queue for queue in self.queues if queue != self.consume_queue)
        for queue in (self.consume_queue, *others):
            self.app.control.add_consumer(queue, destination=destination, reply=False)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        else:
            self.app.close()


def run_batch(
    target: Target,
    broker: BrokerDb,
    database: BenchDatabase,
    count: int,
    *,
    before_wait: Callable[[], None] | None = None,
) -> tuple[float, float, float]:
    """Submit ``count`` calls and wait until all are done: (start, submitted, done)."""
    prefix = f"b{uuid.uuid4().hex[:8]}/"
    started = time.perf_counter()
    for n in range(count):
        target.submit(f"{prefix}{n}", n)
    submitted = time.perf_counter()
    if before_wait is not None:
        before_wait()
        started = time.perf_counter()
    timeout = 60 + count * 0.1
    wait_until(
        lambda: broker.outstanding(target.queues) == 0, timeout, "the queue to drain",
        interval=POLL,
    )  # fmt: skip
    finished = time.perf_counter()
    # The broker says every message was acknowledged; the database must agree.
    if target.mode != "noop":
        wait_until(
            lambda: target.done_count(database, prefix) == count,
            30,
            f"{count} {target.mode} calls to be recorded as done",
            interval=0.1,
        )
    return started, submitted, finished


def run_mode(
    mode: str, args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> Run:
    broker.clear()
    sqlite_file: Path | None = None
    store_url = database.url
    if mode in TOOLSAFE_MODES and args.store == "sqlite":
        from toolsafe.recovery.db import migrate

        sqlite_file = tmp / f"toolsafe-{uuid.uuid4().hex[:8]}.db"
        store_url = f"sqlite:///{sqlite_file}"
        migrate(store_url)
    env = worker_env(broker.url, store_url, RELAY if mode == "relay" else None)
    target = Target(mode, env, args.call_ms, sqlite_file)

    def database_cpu() -> float:
        return 0.0 if sqlite_file is not None else backend_cpu_seconds(database)

    worker: Process = start_worker(
        target.app_name,
        target.queues,
        env=env,
        directory=tmp,
        name=mode,
        pool=args.pool,
        concurrency=args.concurrency,
        loglevel=args.loglevel,
    )
    try:
        with worker:
            node = f"{worker.name}@{node_host()}"
            ready = wait_worker_ready(worker, target.app, node, args.loglevel)
            destination = [node]
            if args.warmup:
                run_batch(target, broker, database, args.warmup)
            cpu_before, main_before = worker.cpu_seconds(), cpu_seconds(worker.pid)
            db_before = database_cpu()
            started, submitted, finished = run_batch(target, broker, database, args.steps)
            cpu_after, main_after = worker.cpu_seconds(), cpu_seconds(worker.pid)
            db_after = database_cpu()
            # The drain: the worker stops consuming, the queue fills, the worker resumes.
            target.stop(destination)

            wal: list[float] = []

            def resume() -> None:
                if sqlite_file is None:
                    wal.append(wal_position(database))
                target.resume(destination)

            drain_start, _, drain_end = run_batch(
                target, broker, database, args.steps, before_wait=resume
            )
            if wal:
                wal.append(wal_position(database))
    finally:
        target.close()
    return Run(
        mode=mode,
        steps=args.steps,
        e2e_seconds=finished - started,
        submit_seconds=submitted - started,
        drain_seconds=drain_end - drain_start,
        worker_cpu=cpu_after - cpu_before,
        worker_main_cpu=main_after - main_before,
        database_cpu=db_after - db_before,
        ready_seconds=ready,
        drain_wal_bytes=wal[-1] - wal[0] if len(wal) == 2 else 0.0,
    )


def wal_position(database: BenchDatabase) -> float:
    """The server's WAL write position in bytes (the run's database is the only busy one,
    so the difference over a drain is what the worker's transactions wrote)."""
    with database.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return float(str(row[0])) if row else 0.0


def node_host() -> str:
    import socket

    return socket.gethostname()


def _median(runs: list[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(run) for run in runs)


def _per_step(attribute: str) -> Callable[[Run], float]:
    return lambda run: float(getattr(run, attribute)) / run.steps * 1000


def report(results: dict[str, list[Run]], args: argparse.Namespace) -> None:
    print("\nmedians; ms/step = 1000 / rate (wall); CPU = ms of CPU per step during the")
    print("end-to-end batch, in the worker's processes and in PostgreSQL's backends")
    print(
        f"{'mode':38} {'e2e/s':>7} {'ms/step':>7} {'drain/s':>7} {'ms/step':>7} "
        f"{'wCPU':>6} {'dbCPU':>6} {'submit ms':>9} {'WAL B/step':>10}"
    )
    for mode, runs in results.items():
        e2e = _median(runs, lambda r: r.e2e_rate)
        drain = _median(runs, lambda r: r.drain_rate)
        cpu = _median(runs, _per_step("worker_cpu"))
        db_cpu = _median(runs, _per_step("database_cpu"))
        submit = _median(runs, _per_step("submit_seconds"))
        wal = _median(runs, lambda r: r.drain_wal_bytes / r.steps)
        print(
            f"{LABELS[mode]:38} {e2e:7.1f} {1000 / e2e:7.2f} {drain:7.1f} {1000 / drain:7.2f} "
            f"{cpu:6.2f} {db_cpu:6.2f} {submit:9.3f} {wal:10.0f}"
        )
    print("\nworker CPU per step (ms, medians): the main process, then the pool processes")
    for mode, runs in results.items():
        main = _median(runs, _per_step("worker_main_cpu"))
        pool = _median(runs, lambda r: (r.worker_cpu - r.worker_main_cpu) / r.steps * 1000)
        print(f"  {LABELS[mode]:38} main {main:5.2f}   pool {pool:5.2f}")
    if len(args.repeat_values) > 1:
        print("\nall runs (e2e/s, drain/s):")
        for mode, runs in results.items():
            shown = ", ".join(f"{r.e2e_rate:.0f}/{r.drain_rate:.0f}" for r in runs)
            print(f"  {mode:9} {shown}")
    for ours in TOOLSAFE_MODES:
        if ours not in results:
            continue
        tool = results[ours]
        print(f"\nratios ({LABELS[ours]} / baseline; 1.00 = as fast) and per-step overhead:")
        for mode in ("noop", "rows"):
            if mode not in results:
                continue
            base = results[mode]
            print(f"  vs {LABELS[mode]}:")
            for phase, value in (
                ("e2e", lambda r: r.e2e_rate),
                ("drain", lambda r: r.drain_rate),
            ):
                mine, theirs = _median(tool, value), _median(base, value)
                extra = 1000 / mine - 1000 / theirs
                print(f"    {phase:10} {mine / theirs:5.2f}x  {extra:+6.2f} ms/step wall")
            for name, attribute in (("worker CPU", "worker_cpu"), ("db CPU", "database_cpu")):
                extra = _median(tool, _per_step(attribute)) - _median(base, _per_step(attribute))
                print(f"    {name:10} {extra:+6.2f} ms/step")
        if "rows" in results:
            print_targets(tool, results["rows"], LABELS[ours])
    print(f"\nload average at the end: {load_average()}")


# The hot-path issue's targets against the hand-rolled task in the same run (ratios of
# medians); the batch submission's is printed by ``benchmarks.submit_cost``.
DRAIN_TARGET: Final = 1.0
E2E_TARGET: Final = 0.9
SUBMIT_TARGET: Final = 1.5


def print_targets(tool: list[Run], rows: list[Run], label: str = LABELS["toolsafe"]) -> None:
    def ratio(value: Callable[[Run], float]) -> float:
        return _median(tool, value) / _median(rows, value)

    drain = ratio(lambda r: r.drain_rate)
    e2e = ratio(lambda r: r.e2e_rate)
    submit = ratio(_per_step("submit_seconds"))
    print(f"\ntargets ({label} / the hand-rolled task, medians of this run):")
    for name, value, target, met in (
        ("worker drain", drain, f">= {DRAIN_TARGET}x", drain >= DRAIN_TARGET),
        ("end to end", e2e, f">= {E2E_TARGET}x", e2e >= E2E_TARGET),
        ("submit vs a plain send_task", submit, f"<= {SUBMIT_TARGET}x", submit <= SUBMIT_TARGET),
    ):
        print(f"  {name:28} {value:5.2f}x  (target {target})  {'met' if met else 'NOT met'}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--warmup", type=int, default=50, help="calls before measuring")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, interleaved")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads", "solo"])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--call-ms", type=float, default=1.0, help="the stand-in call's time")
    parser.add_argument("--loglevel", default="INFO", help="the workers' log level")
    parser.add_argument(
        "--store",
        default="postgresql",
        choices=["postgresql", "sqlite"],
        help="toolsafe's store (the plain-Celery modes always use PostgreSQL)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help=f"comma-separated, of {', '.join(MODES)}",
    )
    parser.add_argument(
        "--drop-index",
        action="append",
        default=[],
        metavar="NAME",
        help="drop this index of the steps table after the migration (PostgreSQL; repeat "
        "for several): what its upkeep costs the hot path",
    )
    add_service_options(parser)
    return parser


def drop_indexes(database: BenchDatabase, names: Sequence[str]) -> None:
    """Drop the named indexes of ``steps``; an unknown name stops the run."""
    with database.connect() as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'steps'")
        existing = {str(row[0]) for row in rows.fetchall()}
    unknown = sorted(set(names) - existing)
    if unknown:
        raise BenchError(
            f"--drop-index: the steps table has no index {', '.join(unknown)}; "
            f"it has {', '.join(sorted(existing))}"
        )
    for name in names:
        database.execute(f'DROP INDEX "{name}"')


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise BenchError(f"--modes: unknown {', '.join(unknown) or '(none)'}; known: {MODES}")
    if args.steps < 1 or args.repeat < 1 or args.warmup < 0:
        raise BenchError("--steps and --repeat must be at least 1, --warmup at least 0")
    args.repeat_values = list(range(args.repeat))
    header(
        f"throughput: {args.steps} calls, pool {args.pool} x{args.concurrency}, "
        f"call {args.call_ms:g} ms, log level {args.loglevel}, toolsafe store {args.store}"
    )
    results: dict[str, list[Run]] = {mode: [] for mode in modes}
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-bench-") as tmp,
    ):
        database.execute(baseline.CALLS_TABLE_DDL)
        if args.drop_index:
            if args.store != "postgresql":
                raise BenchError("--drop-index applies to the PostgreSQL store")
            drop_indexes(database, args.drop_index)
            print(f"# dropped indexes: {', '.join(args.drop_index)}", flush=True)
        for round_number in args.repeat_values:
            for mode in modes:
                run = run_mode(mode, args, broker, database, Path(tmp))
                results[mode].append(run)
                print(
                    f"round {round_number + 1} {mode:9} e2e {run.e2e_rate:7.1f}/s  "
                    f"drain {run.drain_rate:7.1f}/s  worker ready in {run.ready_seconds:.1f}s  "
                    f"load {load_average()}",
                    flush=True,
                )
    report(results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
