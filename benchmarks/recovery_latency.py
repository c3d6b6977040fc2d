"""Recovery latency after a worker dies mid-write, side by side with plain Celery.

``python -m benchmarks.recovery_latency`` runs ``create_invoice`` against the example
downstream in its naive mode (every POST is an effect, no deduplication), lets the
downstream store the write and stall its answer, and then, 50 ms into the stall:

- ``child``: SIGKILLs the pool process that holds the step, on a live node (the worker's
  main process sees it die: verification at once, no lease wait);
- ``node``: SIGKILLs the whole worker (main process and children) and starts another:
  nobody saw it die, so the short lease's expiry and the next sweep recover it;
- ``paused``: SIGSTOPs the pool process, waits until its step was recovered, resumes
  it, and counts the effects (its late result must be refused, nothing sent twice).

The plain-Celery baseline (``acks_late``, ``reject_on_worker_lost``, prefetch 1, the
hand-rolled "row before, update after" task) is killed the same two ways in the same
run: its pool process (the message is redelivered at once), its whole node
(``visibility_timeout`` = the lease). A second row for one call is a duplicate write.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.celeryconfig import QUEUES
from toolsafe.harness import Process, wait_until
from toolsafe.recovery.owners import LeaseOwner
from toolsafe.recovery.states import TERMINAL
from toolsafe.recovery.store import EventRecord, StorePort

SCENARIOS: Final = ("child", "node", "paused")
TOOL: Final = "create_invoice"
STALL: Final = 10.0  # the downstream holds its answer this long after storing the write
KILL_DELAY: Final = 0.05  # into the stall, as in the measurement
BASELINE_CALL_MS: Final = 10_000.0


@dataclass(frozen=True)
class Recovery:
    scenario: str
    to_verifying: float  # kill → the step in verification
    to_final: float  # kill → terminal state
    final_state: str
    executions: int  # execution claims granted for the operation_ref
    effects: int  # writes the naive downstream stored for it


@dataclass(frozen=True)
class Redelivery:
    scenario: str
    latency: float  # kill → the redelivered task wrote again (its second INSERT)
    rows: int  # rows for one call: 2 means a duplicate write


def toolsafe_env(args: argparse.Namespace, downstream_url: str) -> dict[str, str]:
    return {
        "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
        "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream_url,
        "TOOLSAFE_EXAMPLE_TIMEOUT": f"{STALL + 2:g}",
        "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "0.5",
        "TOOLSAFE_LEASE_SECONDS": f"{args.lease:g}",
        "TOOLSAFE_HEARTBEAT_INTERVAL": f"{args.lease / 5:g}",
        # Longer than the lease: heartbeats keep a live call's short lease alive.
        "TOOLSAFE_TASK_TIME_LIMIT": f"{STALL + 5:g}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{STALL + 4:g}",
        "TOOLSAFE_SWEEP_INTERVAL": f"{args.sweep_interval:g}",
        "TOOLSAFE_REPUBLISH_AFTER": f"{max(2 * args.sweep_interval, 1.0):g}",
        "TOOLSAFE_MAX_ETA": "10",
        "TOOLSAFE_ETA_JITTER": "0.05",
        "TOOLSAFE_VISIBILITY_TIMEOUT": "300",
        "TOOLSAFE_RETRY_BASE_DELAY": "0.1",
        "TOOLSAFE_RETRY_MAX_DELAY": "0.5",
        "TOOLSAFE_VERIFY_BASE_DELAY": "0.2",
        "TOOLSAFE_VERIFY_MAX_DELAY": "0.5",
    }


def _first(events: list[EventRecord], kind: str) -> EventRecord:
    for event in events:
        if event.kind == kind:
            return event
    raise BenchError(f"no {kind} event: {[event.kind for event in events]}")


@contextmanager
def running(process: Process) -> Iterator[Process]:
    """A started worker or beat, ready, and SIGKILLed at the end."""
    with process:
        process.wait_ready()
        yield process


def _holder(store: StorePort, ref: str) -> int:
    wait_until(lambda: store.get(ref).lease_owner is not None, 30, f"{ref} to be claimed")
    owner = LeaseOwner.parse(store.get(ref).lease_owner)
    if owner is None:
        raise BenchError(f"the lease owner of {ref} names no process")
    return owner.pid


@contextmanager
def _rescuer(
    scenario: str, env: dict[str, str], args: argparse.Namespace, tmp: Path
) -> Iterator[None]:
    if scenario != "node":
        yield
        return
    rescuer = start_worker(
        "toolsafe", QUEUES, env=env, directory=tmp, name="rescuer", pool=args.pool,
        concurrency=args.concurrency,
    )  # fmt: skip
    with running(rescuer):
        yield


def measure_toolsafe(
    scenario: str,
    args: argparse.Namespace,
    broker: BrokerDb,
    database: BenchDatabase,
    downstream: DownstreamService,
    tmp: Path,
) -> Recovery:
    from toolsafe.settings import Settings
    from toolsafe.tasks.app import create_app
    from toolsafe.tasks.client import Client

    ref = f"rec/{scenario}/{uuid.uuid4().hex[:10]}"
    env = worker_env(broker.url, database.url, toolsafe_env(args, downstream.url))
    client = Client(create_app(Settings.from_env(env)))
    store = client.runtime.store
    try:
        worker = start_worker(
            "toolsafe", QUEUES, env=env, directory=tmp, name=f"victim-{scenario}",
            pool=args.pool, concurrency=args.concurrency,
        )  # fmt: skip
        with running(worker):
            worker.wait_ready()
            downstream.state.add_fault(
                {"fault": "stall_after_store", "operation_ref": ref, "seconds": STALL}
            )
            client.submit(
                TOOL,
                {"customer_id": "cus_b", "amount_cents": 100, "currency": "EUR"},
                operation_ref=ref,
            )
            pid = _holder(store, ref)
            wait_until(lambda: downstream.effects().get(ref, 0) >= 1, 30, "the stored write")
            time.sleep(KILL_DELAY)
            killed_at = time.time()
            if scenario == "node":
                worker.kill()
            else:
                os.kill(pid, signal.SIGSTOP if scenario == "paused" else signal.SIGKILL)
            with _rescuer(scenario, env, args, tmp):
                wait_until(
                    lambda: store.get(ref).state in TERMINAL,
                    args.lease * 4 + 60,
                    f"step {ref} to reach a terminal state",
                    interval=0.01,
                )
                if scenario == "paused":
                    os.kill(pid, signal.SIGCONT)
                    wait_until(
                        lambda: f"lease_lost {ref}" in worker.text(),
                        STALL + 10,
                        "the resumed process to have its result refused",
                    )
        events = store.events(ref)
        step = store.get(ref)
    finally:
        client.close()
    claims = [e for e in events if e.kind == "claimed" and e.detail.get("claim") == "execute"]
    verifying = _first(events, "lease_expired").at.timestamp()
    final = next(e for e in reversed(events) if e.to_state in TERMINAL).at.timestamp()
    return Recovery(
        scenario=scenario,
        to_verifying=verifying - killed_at,
        to_final=final - killed_at,
        final_state=str(step.state),
        executions=len(claims),
        effects=downstream.effects().get(ref, 0),
    )


def _busy_child(worker: Process) -> int:
    """The pool process that sleeps inside the baseline task (the others wait on a pipe)."""
    main = worker.pid
    listed = Path(f"/proc/{main}/task/{main}/children").read_text().split()
    for child in listed:
        try:
            if "nanosleep" in Path(f"/proc/{child}/wchan").read_text():
                return int(child)
        except OSError:
            continue
    raise BenchError("cannot tell which baseline pool process runs the task")


def measure_baseline(
    scenario: str, args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> Redelivery:
    ref = f"rec/plain-{scenario}/{uuid.uuid4().hex[:10]}"
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

    def rows() -> list[float]:
        query = "SELECT extract(epoch FROM created_at) FROM bench_calls WHERE operation_ref = %s"
        with database.connect() as conn:
            return sorted(float(str(row[0])) for row in conn.execute(query, (ref,)).fetchall())

    try:
        first = start_worker(
            "benchmarks.baseline", [baseline.QUEUE], env=env, directory=tmp,
            name=f"plain-{scenario}", pool=args.pool, concurrency=args.concurrency,
        )  # fmt: skip
        with first:
            first.wait_ready()
            app.send_task(baseline.ROWS_TASK, args=(ref, BASELINE_CALL_MS))
            # Killed inside the call, after the INSERT committed: the write has happened.
            wait_until(lambda: bool(rows()), 60, "the plain task to start", interval=POLL)
            time.sleep(KILL_DELAY)
            killed_at = time.time()
            if scenario == "node":
                first.kill()
            else:
                os.kill(_busy_child(first), signal.SIGKILL)
            if scenario == "node":
                second = start_worker(
                    "benchmarks.baseline", [baseline.QUEUE], env=env, directory=tmp,
                    name="plain-rescuer", pool=args.pool, concurrency=args.concurrency,
                )  # fmt: skip
                with running(second):
                    wait_until(lambda: len(rows()) >= 2, args.lease * 4 + 60, "the redelivery")
            else:
                wait_until(lambda: len(rows()) >= 2, args.lease * 4 + 60, "the redelivery")
    finally:
        app.close()
    found = rows()
    return Redelivery(scenario=scenario, latency=found[1] - killed_at, rows=len(found))


def _spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):6.2f}"


def report(
    results: dict[str, list[Recovery]], plain: dict[str, list[Redelivery]], args: argparse.Namespace
) -> None:
    bound = args.lease + args.sweep_interval
    print(
        f"\nlease {args.lease:g}s (heartbeat {args.lease / 5:g}s), sweep interval "
        f"{args.sweep_interval:g}s; whole-node bound lease + sweep = {bound:g}s"
    )
    print(
        f"{'toolsafe':10} {'runs':>4}  {'kill → verifying (min med max)':>31}  "
        f"{'kill → final (min med max)':>27}  effects per call"
    )
    for scenario, runs in results.items():
        print(
            f"{scenario:10} {len(runs):4}  {_spread([r.to_verifying for r in runs]):>31}  "
            f"{_spread([r.to_final for r in runs]):>27}  "
            f"{', '.join(str(r.effects) for r in runs)} (final "
            f"{', '.join(sorted({r.final_state for r in runs}))})"
        )
    if not plain:
        return
    title = "kill → written again (min med max)"
    print(f"\n{'plain Celery':12} {'runs':>4}  {title:>35}  rows per call")
    for scenario, redone in plain.items():
        print(
            f"{scenario:12} {len(redone):4}  {_spread([r.latency for r in redone]):>35}  "
            f"{', '.join(str(r.rows) for r in redone)} (2 = duplicate write)"
        )
    for scenario, runs in results.items():
        if scenario in plain:
            ours = statistics.median(r.to_final for r in runs)
            theirs = statistics.median(r.latency for r in plain[scenario])
            print(
                f"  {scenario}: toolsafe final {ours:.2f}s without a duplicate, plain Celery "
                f"re-sent the write after {theirs:.2f}s ({ours / theirs:.1f}x)"
            )
    print(f"\nload average at the end: {load_average()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recovery_latency", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=3, help="kills per scenario")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of {', '.join(SCENARIOS)}",
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
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    if not scenarios or set(scenarios) - set(SCENARIOS):
        raise BenchError(f"--scenarios must be among {', '.join(SCENARIOS)}")
    if args.runs < 1 or args.lease < 2 or args.sweep_interval <= 0:
        raise BenchError("--runs at least 1, --lease at least 2 s, --sweep-interval above 0")
    if args.pool != "prefork" or args.concurrency < 2:
        raise BenchError("the pool-process scenarios need --pool prefork --concurrency >= 2")
    header(
        f"recovery latency: lease {args.lease:g}s, sweep every {args.sweep_interval:g}s, "
        f"pool {args.pool} x{args.concurrency}, {args.runs} run(s) per scenario"
    )
    results: dict[str, list[Recovery]] = {name: [] for name in scenarios}
    plain: dict[str, list[Redelivery]] = {}
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-bench-") as tmp_name,
        DownstreamService(naive=True) as downstream,
    ):
        tmp = Path(tmp_name)
        database.execute(baseline.CALLS_TABLE_DDL)
        for number in range(args.runs):
            broker.clear()
            # The sweeper runs as its own service (docker-compose's beat), untouched by
            # the kills.
            beat_env = worker_env(broker.url, database.url, toolsafe_env(args, downstream.url))
            with running(start_beat("toolsafe", env=beat_env, directory=tmp)):
                for scenario in scenarios:
                    run = measure_toolsafe(scenario, args, broker, database, downstream, tmp)
                    results[scenario].append(run)
                    print(
                        f"run {number + 1} toolsafe {scenario:7} verifying "
                        f"{run.to_verifying:6.2f}s, {run.final_state} {run.to_final:6.2f}s, "
                        f"{run.effects} effect(s)  load {load_average()}",
                        flush=True,
                    )
            if args.no_baseline:
                continue
            for scenario in ("child", "node"):
                if scenario not in scenarios:
                    continue
                broker.clear()
                redelivery = measure_baseline(scenario, args, broker, database, tmp)
                plain.setdefault(scenario, []).append(redelivery)
                print(
                    f"run {number + 1} plain Celery {scenario:5} written again after "
                    f"{redelivery.latency:6.2f}s, {redelivery.rows} row(s)  load {load_average()}",
                    flush=True,
                )
    report(results, plain, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
