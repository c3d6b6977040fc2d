"""Where a step's time goes, in one process: the client's submit, the worker's claim /
call / record, and the hand-rolled INSERT/UPDATE body, each timed and profiled.

``python -m benchmarks.profile_step --steps 500`` runs without a worker (the execute
task's body is called directly), interleaves the three in small chunks so the machine's
changing load falls on all of them alike, and prints milliseconds per step, the time of
each database round trip, and the functions that take the most time under cProfile.
``--store sqlite`` puts toolsafe's store on a SQLite file of its own (the hand-rolled body
stays on PostgreSQL). toolsafe's store is opened as a worker's pool process opens it
(``reset_after_fork``: no ping before a checkout); the hand-rolled body keeps
``make_engine``'s ping, as the throughput benchmark's baseline task does.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, event, text

from benchmarks import baseline
from benchmarks.common import (
    ROOT,
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
    worker_env,
)
from benchmarks.noop_adapter import TOOL

CHUNK = 25


class NoHints:
    """A successful step publishes nothing; anything else would be a bug here."""

    def execute(
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool:
        raise BenchError(f"step {operation_ref} asked to run again")

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        raise BenchError(f"step {operation_ref} asked for verification")

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
        raise BenchError(f"step {operation_ref} escalated")


class Phase:
    """One body (hand-rolled, submit, execute): its time, round trips and profile."""

    def __init__(self, label: str, body: Callable[[int], object], profile: bool) -> None:
        self.label = label
        self.body = body
        self.profiler = cProfile.Profile() if profile else None
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # this process's CPU (the client library's included)
        self.count = 0
        self.trips: dict[str, list[float]] = {}

    def run(self, start: int, count: int) -> None:
        if self.profiler is not None:
            self.profiler.enable()
        started = time.perf_counter()
        cpu_started = time.process_time()
        for i in range(start, start + count):
            self.body(i)
        self.cpu_seconds += time.process_time() - cpu_started
        self.seconds += time.perf_counter() - started
        if self.profiler is not None:
            self.profiler.disable()
        self.count += count

    @property
    def ms(self) -> float:
        return self.seconds / self.count * 1000

    @property
    def cpu_ms(self) -> float:
        return self.cpu_seconds / self.count * 1000

    def report(self, top: int) -> None:
        print(f"\n{self.label:46} {self.ms:7.3f} ms/step; database round trips:")
        total = 0.0
        for shape, times in sorted(self.trips.items(), key=lambda item: -sum(item[1])):
            total += sum(times)
            per_step = sum(times) / self.count * 1000
            print(f"    {len(times) / self.count:4.1f}x {per_step:7.3f} ms/step  {shape}")
        trips_ms = total / self.count * 1000
        print(
            f"    round trips together {trips_ms:.3f} ms/step; the rest (Python, and the "
            f"broker publish for submit) {self.ms - trips_ms:.3f} ms/step"
        )
        print(
            f"    CPU of this process (Python, the database and broker clients) "
            f"{self.cpu_ms:.3f} ms/step"
        )
        if self.profiler is None:
            return
        print("    cProfile, by own time:")
        self._print_stats("tottime", top)
        # Whose code the time is spent under: toolsafe's own functions, inclusive time.
        print("    cProfile, toolsafe's functions by cumulative time:")
        self._print_stats("cumulative", top, r"/(adapters|recovery|tasks|benchmarks)/")

    def _print_stats(self, order: str, top: int, only: str | None = None) -> None:
        out = io.StringIO()
        stats = pstats.Stats(self.profiler, stream=out).sort_stats(order)
        if only is None:
            stats.print_stats(top)
        else:
            stats.print_stats(only, top)
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
        root = str(ROOT) + "/"
        shown = [line.replace(root, "") for line in lines[start : start + top + 1]]
        print("\n".join("    " + line[:150] for line in shown))


class RoundTrips:
    """Time of each database round trip (sent to answer read), filed under the phase
    that is running: statements by their shape, COMMIT, ROLLBACK and the pre-ping."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self.phase: Phase | None = None
        self._started: list[float] = []
        for engine in engines:
            event.listen(engine, "before_cursor_execute", self._before)
            event.listen(engine, "after_cursor_execute", self._after)
            # COMMIT, ROLLBACK and pool_pre_ping's ping bypass the cursor events: time the
            # dialect's calls themselves (this engine's dialect instance only).
            dialect = engine.dialect
            for name, label in (
                ("do_commit", "(COMMIT)"),
                ("do_rollback", "(ROLLBACK, connection back to the pool)"),
                ("do_ping", "(pool_pre_ping ping)"),
            ):
                setattr(dialect, name, self._wrap(getattr(dialect, name), label))

    def _file(self, label: str, seconds: float) -> None:
        if self.phase is not None:
            self.phase.trips.setdefault(label, []).append(seconds)

    def _wrap(self, call: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self._file(label, time.perf_counter() - started)

        return timed_call

    def _before(self, *_: Any) -> None:
        self._started.append(time.perf_counter())

    def _after(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self._file(" ".join(statement.split())[:70], time.perf_counter() - self._started.pop())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--top", type=int, default=15, help="functions shown per profile")
    parser.add_argument("--no-profile", action="store_true", help="timings only")
    parser.add_argument(
        "--store",
        default="postgresql",
        choices=["postgresql", "sqlite"],
        help="toolsafe's store (the hand-rolled body always uses PostgreSQL)",
    )
    add_service_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        raise BenchError("--steps must be at least 1")
    profile = not args.no_profile
    header(
        f"profile of one step, in process, {args.steps} steps, call 0 ms, "
        f"toolsafe store {args.store}"
    )
    from toolsafe.recovery.db import make_engine, migrate
    from toolsafe.recovery.store.sql import StepStore
    from toolsafe.settings import Settings
    from toolsafe.tasks import pipeline
    from toolsafe.tasks.app import create_app
    from toolsafe.tasks.client import Client
    from toolsafe.tasks.runtime import reset_after_fork

    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-profile-") as tmp,
    ):
        database.execute(baseline.CALLS_TABLE_DDL)
        store_url = database.url
        if args.store == "sqlite":
            store_url = f"sqlite:///{tmp}/toolsafe.db"
            migrate(store_url)
        client = Client(create_app(Settings.from_env(worker_env(broker.url, store_url))))
        # The store as a pool process opens it after the fork (no ping before a checkout):
        # the execute body's round trips are a worker's.
        reset_after_fork()
        runtime = client.runtime
        hints = NoHints()
        engine = make_engine(database.url)
        insert = text(
            "INSERT INTO bench_calls (operation_ref, state, created_at, updated_at) "
            "VALUES (:ref, 'started', clock_timestamp(), clock_timestamp()) RETURNING id"
        )
        update = text(
            "UPDATE bench_calls SET state = 'done', updated_at = clock_timestamp() WHERE id = :id"
        )
        prefix = f"warm{uuid.uuid4().hex[:6]}/"

        def hand_rolled(i: int) -> None:
            with engine.begin() as conn:
                row_id = conn.execute(insert, {"ref": f"{prefix}{i}"}).scalar_one()
            with engine.begin() as conn:
                conn.execute(update, {"id": row_id})

        def submit(i: int) -> None:
            client.submit(TOOL, {"n": i, "call_ms": 0}, operation_ref=f"{prefix}{i}")

        def execute(i: int) -> None:
            if pipeline.execute(runtime, hints, f"{prefix}{i}") != "succeed":
                raise BenchError(f"step {prefix}{i} did not simply succeed")

        try:
            # Warm every path once (imports, connections, statement caches).
            for body in (hand_rolled, submit, execute):
                body(0)
            store = runtime.store
            if not isinstance(store, StepStore):
                raise BenchError("the benchmark counts round trips of the SQL store")
            trips = RoundTrips([engine, store.engine])
            prefix = f"p{uuid.uuid4().hex[:6]}/"
            phases = [
                Phase("hand-rolled INSERT+commit, UPDATE+commit", hand_rolled, profile),
                Phase("toolsafe submit (client)", submit, profile),
                Phase("toolsafe execute body (claim, call, record)", execute, profile),
            ]
            for start in range(0, args.steps, CHUNK):
                count = min(CHUNK, args.steps - start)
                for phase in phases:
                    trips.phase = phase
                    phase.run(start, count)
                trips.phase = None
            for phase in phases:
                phase.report(args.top)
            rows, sent, ran = (phase.ms for phase in phases)
            print(
                f"\nworker side: toolsafe {ran:.3f} ms vs hand-rolled {rows:.3f} ms = "
                f"{ran / rows:.2f}x ({ran - rows:+.3f} ms/step); client side: submit "
                f"{sent:.3f} ms/step"
            )
            rows_cpu, sent_cpu, ran_cpu = (phase.cpu_ms for phase in phases)
            print(
                f"CPU of this process: execute {ran_cpu:.3f} ms vs hand-rolled {rows_cpu:.3f} ms "
                f"({ran_cpu - rows_cpu:+.3f} ms/step); submit {sent_cpu:.3f} ms/step"
            )
        finally:
            client.close()
            engine.dispose()
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
