"""Recovery latency after a SIGKILL: from the kill of a worker in the middle of a write to
the step's terminal state, with a new worker, against what bounds it (lease + sweep).

``python -m benchmarks.recovery_latency`` kills a toolsafe worker at the fault point
``after_claim`` or ``during_call`` (``tasks/faults.py``), starts a new one, and times the
recovery: lease expiry → sweeper → verification → the same operation_ref run again. The
plain-Celery baseline kills the hand-rolled task's worker during its call and times the
broker's redelivery, with ``visibility_timeout`` set to the same lease.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from benchmarks import baseline
from benchmarks.common import (
    POLL,
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
    start_beat,
    start_worker,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import QUEUES
from toolsafe.harness import wait_until
from toolsafe.recovery.states import TERMINAL
from toolsafe.tasks.faults import fired, write_plan

POINTS: Final = ("after_claim", "during_call")
# The call the during_call fault interrupts: long enough that the kill lands inside it.
DURING_CALL_MS: Final = 1500.0
KILL_DELAY: Final = 0.2


@dataclass(frozen=True)
class Recovery:
    point: str
    latency: float  # kill → terminal state, seconds
    lease_left: float  # kill → the lease's expiry
    detected: float  # lease expiry → the sweeper moved the step to verifying
    resolved: float  # verifying → terminal
    worker_ready: float  # kill → the new worker was ready
    final_state: str
    executions: int  # execution claims granted for the operation_ref


@dataclass(frozen=True)
class Redelivery:
    latency: float  # kill → the task's UPDATE committed by the new worker
    worker_ready: float
    rows: int  # rows the naive task inserted for one call: 2 means a duplicate write


def toolsafe_env(args: argparse.Namespace, plan: Path) -> dict[str, str]:
    lease = args.lease
    return {
        "TOOLSAFE_LEASE_SECONDS": f"{lease:g}",
        # Below the lease, as the settings require (a live call never outlives its lease).
        "TOOLSAFE_TASK_TIME_LIMIT": f"{lease * 0.8:g}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{lease * 0.6:g}",
        "TOOLSAFE_SWEEP_INTERVAL": f"{args.sweep_interval:g}",
        "TOOLSAFE_REPUBLISH_AFTER": f"{max(2 * args.sweep_interval, 1.0):g}",
        "TOOLSAFE_MAX_ETA": "10",
        "TOOLSAFE_ETA_JITTER": "0.05",
        "TOOLSAFE_VISIBILITY_TIMEOUT": "300",
        "TOOLSAFE_RETRY_BASE_DELAY": "0.1",
        "TOOLSAFE_RETRY_MAX_DELAY": "0.5",
        "TOOLSAFE_VERIFY_BASE_DELAY": "0.2",
        "TOOLSAFE_VERIFY_MAX_DELAY": "0.5",
        "TOOLSAFE_FAULTS_ENABLED": "1",
        "TOOLSAFE_FAULT_PLAN": str(plan),
    }


def _ts(value: datetime | None) -> float:
    if value is None:
        raise BenchError("an expected timestamp is missing from the step's events")
    return value.timestamp()


def measure_toolsafe(
    point: str, args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> Recovery:
    from toolsafe.settings import Settings
    from toolsafe.tasks.app import create_app
    from toolsafe.tasks.client import Client

    ref = f"rec/{point}/{uuid.uuid4().hex[:10]}"
    plan = tmp / f"plan-{uuid.uuid4().hex[:6]}.json"
    state_dir = tmp / f"{plan.name}.fired"
    write_plan(plan, {ref: {point: {"action": "kill", "delay": KILL_DELAY}}})
    env = worker_env(broker.url, database.url, toolsafe_env(args, plan))
    env["TOOLSAFE_FAULT_STATE_DIR"] = str(state_dir)
    client = Client(create_app(Settings.from_env(env)))
    store = client.runtime.store
    try:
        first = start_worker(
            "toolsafe", QUEUES, env=env, directory=tmp, name="doomed", pool=args.pool,
            concurrency=args.concurrency,
        )  # fmt: skip
        with first:
            first.wait_ready()
            call_ms = DURING_CALL_MS if point == "during_call" else 1.0
            client.submit(TOOL, {"n": 0, "call_ms": call_ms}, operation_ref=ref)
            wait_until(
                lambda: bool(fired(state_dir)), 60, f"the {point} fault to fire", interval=POLL
            )
            killed_at = float(fired(state_dir)[0]["at"])
            # The fault killed the pool process; the rest of the worker dies with it.
        second = start_worker(
            "toolsafe", QUEUES, env=env, directory=tmp, name="rescuer", pool=args.pool,
            concurrency=args.concurrency,
        )  # fmt: skip
        with second:
            second.wait_ready()
            ready_at = time.time()
            wait_until(
                lambda: store.get(ref).state in TERMINAL,
                args.lease * 4 + 90,
                f"step {ref} to reach a terminal state",
                interval=0.02,
            )
        events = store.events(ref)
        step = store.get(ref)
    finally:
        client.close()
    claims = [e for e in events if e.kind == "claimed" and e.detail.get("claim") == "execute"]
    expiry = next(e for e in events if e.kind == "lease_expired")
    lease_end = datetime.fromisoformat(str(expiry.detail["lease_expires_at"]))
    done = _ts(events[-1].at)
    return Recovery(
        point=point,
        latency=done - killed_at,
        lease_left=_ts(lease_end) - killed_at,
        detected=_ts(expiry.at) - _ts(lease_end),
        resolved=done - _ts(expiry.at),
        worker_ready=ready_at - killed_at,
        final_state=str(step.state),
        executions=len(claims),
    )


def measure_baseline(
    args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> Redelivery:
    ref = f"rec/plain/{uuid.uuid4().hex[:10]}"
    env = worker_env(
        broker.url,
        database.url,
        {
            baseline.VISIBILITY_ENV: f"{args.lease:g}",
            baseline.RESTORE_ENV: f"{args.sweep_interval:g}",
        },
    )
    from toolsafe.settings import Settings

    app = baseline.create_app(Settings.from_env(env))

    def rows(state: str | None = None) -> list[tuple[object, ...]]:
        query = (
            "SELECT state, extract(epoch FROM updated_at) FROM bench_calls WHERE operation_ref = %s"
        )
        with database.connect() as conn:
            found = conn.execute(query, (ref,)).fetchall()
        return [row for row in found if state is None or row[0] == state]

    try:
        first = start_worker(
            "benchmarks.baseline", [baseline.QUEUE], env=env, directory=tmp, name="doomed-plain",
            pool=args.pool, concurrency=args.concurrency,
        )  # fmt: skip
        with first:
            first.wait_ready()
            app.send_task(baseline.ROWS_TASK, args=(ref, DURING_CALL_MS))
            # Killed inside the call, after the INSERT committed: the write has happened.
            wait_until(lambda: bool(rows()), 60, "the plain task to start", interval=POLL)
            time.sleep(KILL_DELAY)
            killed_at = time.time()
        second = start_worker(
            "benchmarks.baseline", [baseline.QUEUE], env=env, directory=tmp, name="rescuer-plain",
            pool=args.pool, concurrency=args.concurrency,
        )  # fmt: skip
        with second:
            second.wait_ready()
            ready_at = time.time()
            wait_until(
                lambda: bool(rows("done")),
                args.lease * 4 + 90,
                "the redelivered plain task",
                interval=POLL,
            )
    finally:
        app.close()
    done = float(str(rows("done")[0][1]))
    return Redelivery(latency=done - killed_at, worker_ready=ready_at - killed_at, rows=len(rows()))


def _spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):6.2f}"


def report(
    results: dict[str, list[Recovery]], plain: list[Redelivery], args: argparse.Namespace
) -> None:
    bound = args.lease + args.sweep_interval
    print(f"\nlease {args.lease:g}s + sweep interval {args.sweep_interval:g}s = bound {bound:g}s")
    print(f"{'kill at':14} {'runs':>4}  {'latency s (min med max)':>24} {'med/bound':>9}")
    for point, runs in results.items():
        latencies = [run.latency for run in runs]
        print(
            f"{point:14} {len(runs):4}  {_spread(latencies):>24} "
            f"{statistics.median(latencies) / bound:9.2f}"
        )
    print("\nwhere the time goes (medians, s): kill → lease end | lease end → swept to")
    print("verifying | verifying → terminal; new worker ready after the kill")
    for point, runs in results.items():
        print(
            f"  {point:12} {statistics.median(r.lease_left for r in runs):6.2f} | "
            f"{statistics.median(r.detected for r in runs):6.2f} | "
            f"{statistics.median(r.resolved for r in runs):6.2f};  ready "
            f"{statistics.median(r.worker_ready for r in runs):5.2f}; final "
            f"{', '.join(sorted({r.final_state for r in runs}))}; execution claims "
            f"{', '.join(str(r.executions) for r in runs)}"
        )
    if not plain:
        return
    plain_latency = statistics.median(r.latency for r in plain)
    print(
        f"\nplain Celery (visibility_timeout {args.lease:g}s, restore every "
        f"{args.sweep_interval:g}s): latency {_spread([r.latency for r in plain])}; "
        f"new worker ready {statistics.median(r.worker_ready for r in plain):.2f}s; "
        f"rows written per call {', '.join(str(r.rows) for r in plain)} (2 = duplicate write)"
    )
    for point, runs in results.items():
        ours = statistics.median(run.latency for run in runs)
        print(f"  ratio toolsafe {point} / plain Celery: {ours / plain_latency:5.2f}x")
    print(f"\nload average at the end: {load_average()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recovery_latency", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=3, help="kills per fault point")
    parser.add_argument(
        "--points", default=",".join(POINTS), help=f"comma-separated, of {', '.join(POINTS)}"
    )
    parser.add_argument("--lease", type=float, default=5.0, help="lease seconds (and the "
                        "baseline's visibility_timeout)")  # fmt: skip
    parser.add_argument("--sweep-interval", type=float, default=1.0)
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads", "solo"])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--no-baseline", action="store_true", help="skip plain Celery")
    add_service_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    points = [point.strip() for point in args.points.split(",") if point.strip()]
    if not points or set(points) - set(POINTS):
        raise BenchError(f"--points must be among {', '.join(POINTS)}")
    if args.runs < 1 or args.lease < 2 or args.sweep_interval <= 0:
        raise BenchError("--runs at least 1, --lease at least 2 s, --sweep-interval above 0")
    header(
        f"recovery latency: lease {args.lease:g}s, sweep every {args.sweep_interval:g}s, "
        f"pool {args.pool} x{args.concurrency}, {args.runs} kill(s) per point"
    )
    results: dict[str, list[Recovery]] = {point: [] for point in points}
    plain: list[Redelivery] = []
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-bench-") as tmp_name,
    ):
        tmp = Path(tmp_name)
        database.execute(baseline.CALLS_TABLE_DDL)
        for number in range(args.runs):
            broker.clear()
            # The sweeper runs as its own service (docker-compose's beat), untouched by
            # the kill; it reads the fault-free settings of the same deployment.
            beat_env = worker_env(broker.url, database.url, toolsafe_env(args, tmp / "none"))
            with start_beat("toolsafe", env=beat_env, directory=tmp) as beat:
                beat.wait_ready()
                for point in points:
                    run = measure_toolsafe(point, args, broker, database, tmp)
                    results[point].append(run)
                    print(
                        f"run {number + 1} toolsafe {point:12} {run.latency:6.2f}s to "
                        f"{run.final_state}  load {load_average()}",
                        flush=True,
                    )
            if not args.no_baseline:
                broker.clear()
                redelivery = measure_baseline(args, broker, database, tmp)
                plain.append(redelivery)
                print(
                    f"run {number + 1} plain Celery          {redelivery.latency:6.2f}s, "
                    f"{redelivery.rows} row(s)  load {load_average()}",
                    flush=True,
                )
    report(results, plain, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
