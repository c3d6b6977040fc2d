"""ETA lateness: how late a retry runs after its ``not_before``, against plain Celery's ETA.

``python -m benchmarks.eta_lateness --steps 300`` submits N ``bench_retry`` steps: the
first attempt of each is rate limited with a ``not_before`` a few seconds ahead (spread
evenly over ``--min-delay`` .. ``--max-delay``), so the step waits in ``waiting_retry``
with ``due_at`` = that ``not_before``; the second attempt succeeds. A step's lateness is
the time of its second claim minus the ``due_at`` it waited for, both read from the
step's events in the store: end to end, whatever releases the retry (an ETA message, or
a timer in the sweeper's process; the worker runs beat inside it, ``-B``).

The baseline, in the same run and on the same worker shape: a plain Celery task whose
first run opens its PostgreSQL connection and sends the task again with ``eta`` = now +
the same delay (so its worker, like toolsafe's, runs every first attempt and then every
retry), and whose lateness is ``time.time()`` at the start of that second run's body
minus its ``eta``. Prints p50/p95/p99/max of both and the target (p99 <= 1.1x).

With a delay shorter than the retry policy's first backoff (1 s), ``due_at`` is the
backoff's, not the ``not_before``: the lateness is still measured from ``due_at``.

The shortest delay (4 s by default) leaves the first attempts done before the first
retry is due: a retry due while the worker still runs the first attempts waits for a
free pool process behind them, and that wait is the drain's speed (``throughput``), not
the ETA's. toolsafe's submits and first attempts take longer than plain Celery's
``send_task`` of its first runs (2.5 s for 300 steps on a busy two-core machine, against
0.2 s), so a shorter delay measures that difference instead; each toolsafe round prints
how many of its retries came due before its last first attempt ended (0 in a clean run).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from benchmarks import baseline
from benchmarks.common import (
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
    start_worker,
    worker_env,
)
from benchmarks.noop_adapter import RETRY_TOOL
from toolsafe.celeryconfig import QUEUES
from toolsafe.harness import wait_until
from toolsafe.recovery.records import EventRecord
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

P99_TARGET: Final = 1.1
WAITING_RETRY: Final = "waiting_retry"


def delays(count: int, low: float, high: float) -> list[float]:
    """``count`` delays evenly over [low, high], in submission order."""
    if count == 1:
        return [low]
    return [low + (high - low) * n / (count - 1) for n in range(count)]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest rank: the smallest value at least ``share`` of the values do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def p99_ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs > 0 else math.inf


def _waiting(events: Sequence[EventRecord]) -> tuple[int, datetime] | None:
    """The index of the event that left the step in ``waiting_retry``, and its
    ``due_at``."""
    for index, event in enumerate(events):
        to_state = event.to_state.value if event.to_state is not None else None
        if to_state == WAITING_RETRY and "due_at" in event.detail:
            due = datetime.fromisoformat(str(event.detail["due_at"]))
            return index, due if due.tzinfo is not None else due.replace(tzinfo=UTC)
    return None


def retry_lateness(events: Sequence[EventRecord]) -> float | None:
    """Seconds from the ``due_at`` the step waited for to the claim of its retry."""
    waiting = _waiting(events)
    if waiting is None:
        return None
    index, due = waiting
    for event in events[index + 1 :]:
        if event.kind == "claimed":
            return (event.at - due).total_seconds()
    return None


def due_during_first_attempts(histories: Sequence[Sequence[EventRecord]]) -> int:
    """Retries that came due before the run's last first attempt was recorded (the
    event that left ``waiting_retry`` behind it): those may have waited behind first
    attempts for a pool process."""
    recorded: list[datetime] = []
    dues: list[datetime] = []
    for history in histories:
        waiting = _waiting(history)
        if waiting is not None:
            index, due = waiting
            recorded.append(history[index].at)
            dues.append(due)
    if not recorded:
        return 0
    last = max(recorded)
    return sum(1 for due in dues if due < last)


def count(database: BenchDatabase, sql: str, *params: object) -> int:
    with database.connect() as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    value = row[0] if row else 0
    assert isinstance(value, int)
    return value


def run_toolsafe(
    args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> tuple[list[float], int]:
    broker.clear()
    extra = {"TOOLSAFE_ETA_JITTER": str(args.jitter)}
    if args.max_eta is not None:
        extra["TOOLSAFE_MAX_ETA"] = str(args.max_eta)
    env = worker_env(broker.url, database.url, extra)
    prefix = f"late{uuid.uuid4().hex[:8]}/"
    name = f"late-ts-{uuid.uuid4().hex[:6]}"
    worker = start_worker(
        "toolsafe", list(QUEUES), env=env, directory=tmp, name="late-ts",
        concurrency=args.concurrency, beat_schedule=tmp / f"{name}-schedule",
    )  # fmt: skip
    client = Client(create_app(Settings.from_env(env)))
    try:
        with worker:
            worker.wait_ready()
            refs = []
            for n, delay in enumerate(delays(args.steps, args.min_delay, args.max_delay)):
                ref = f"{prefix}{n}"
                client.submit(RETRY_TOOL, {"n": n, "delay_s": delay}, operation_ref=ref)
                refs.append(ref)
            wait_until(
                lambda: count(
                    database,
                    "SELECT count(*) FROM steps WHERE state = 'succeeded' "
                    "AND operation_ref LIKE %s",
                    prefix + "%",
                ) == args.steps,
                args.max_delay + args.timeout,
                f"{args.steps} bench_retry steps to succeed",
                interval=0.2,
            )  # fmt: skip
        histories = [client.runtime.store.events(ref) for ref in refs]
    finally:
        client.close()
    found = [retry_lateness(events) for events in histories]
    late = [value for value in found if value is not None]
    if len(late) < len(found):
        missing = len(found) - len(late)
        raise BenchError(f"{missing} steps have no waiting_retry due_at and retry claim events")
    overlapped = due_during_first_attempts(histories)
    if args.show_worst:
        worst = max(range(len(late)), key=late.__getitem__)
        print(f"  the latest retry ({late[worst] * 1000:.1f} ms), its events:")
        for event in histories[worst]:
            moved = f"{event.from_state.value if event.from_state else '-'} -> "
            moved += event.to_state.value if event.to_state else "-"
            shown = {
                key: event.detail[key]
                for key in ("due_at", "reason", "claim")
                if key in event.detail
            }
            print(f"    {event.at.isoformat()}  {event.kind:10} {moved:28} {shown}")
    return late, overlapped


def run_plain(
    args: argparse.Namespace, broker: BrokerDb, database: BenchDatabase, tmp: Path
) -> tuple[list[float], int]:
    broker.clear()
    env = worker_env(broker.url, database.url)
    prefix = f"late{uuid.uuid4().hex[:8]}/"
    worker = start_worker(
        "benchmarks.baseline", [baseline.QUEUE], env=env, directory=tmp, name="late-plain",
        concurrency=args.concurrency,
    )  # fmt: skip
    app = baseline.create_app(Settings.from_env(env))
    try:
        with worker:
            worker.wait_ready()
            for n, delay in enumerate(delays(args.steps, args.min_delay, args.max_delay)):
                app.send_task(baseline.STAMP_TASK, args=(f"{prefix}{n}", delay))
            wait_until(
                lambda: count(
                    database, "SELECT count(*) FROM bench_stamps WHERE ref LIKE %s", prefix + "%"
                ) == args.steps,
                args.max_delay + args.timeout,
                f"{args.steps} plain tasks' retries to start",
                interval=0.2,
            )  # fmt: skip
    finally:
        app.close()
    with database.connect() as conn:
        rows = conn.execute(
            b"SELECT started - due FROM bench_stamps WHERE ref LIKE %s", (prefix + "%",)
        ).fetchall()
    # Its first runs only send the task again: over before the first retry is due.
    return [float(str(late)) for (late,) in rows], 0


def summary(values: Sequence[float]) -> str:
    shown = "  ".join(
        f"{label} {percentile(values, share) * 1000:8.1f}"
        for label, share in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
    )
    return f"{shown}  ms  (n={len(values)})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.eta_lateness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=300, help="steps (and plain tasks) per run")
    parser.add_argument(
        "--min-delay",
        type=float,
        default=4.0,
        help="shortest wait, seconds (after the first attempts: see above); default %(default)s",
    )
    parser.add_argument(
        "--max-delay", type=float, default=10.0, help="longest wait, seconds; default %(default)s"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each, interleaved")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork pool size")
    parser.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="TOOLSAFE_ETA_JITTER for toolsafe's worker (an intended spread, counted as "
        "lateness here); default %(default)s",
    )
    parser.add_argument(
        "--max-eta",
        type=float,
        default=None,
        help="TOOLSAFE_MAX_ETA for toolsafe (default: the setting's, 10 s: these delays go out "
        "as ETA hints when decided); below --min-delay every retry is parked in the store "
        "and sent by the release timer",
    )
    parser.add_argument(
        "--show-worst", action="store_true", help="print the latest toolsafe retry's events"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds past the longest")
    add_service_options(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or not 0 < args.min_delay <= args.max_delay:
        raise BenchError("--steps and --rounds must be >= 1, 0 < --min-delay <= --max-delay")
    header(
        f"ETA lateness: {args.steps} retries due {args.min_delay:g}-{args.max_delay:g}s ahead, "
        f"prefork x{args.concurrency}, beat in toolsafe's worker, "
        f"TOOLSAFE_ETA_JITTER={args.jitter:g}"
        + (f", TOOLSAFE_MAX_ETA={args.max_eta:g}" if args.max_eta is not None else "")
        + (" (the jitter's intended spread is not removed)" if args.jitter else "")
    )
    late: dict[str, list[float]] = {"plain": [], "toolsafe": []}
    overlaps = 0
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-late-") as tmp,
    ):
        database.execute(baseline.STAMPS_TABLE_DDL)
        ratios: list[float] = []
        for round_number in range(args.rounds):
            p99: dict[str, float] = {}
            for mode, run in (("plain", run_plain), ("toolsafe", run_toolsafe)):
                started = time.monotonic()
                values, overlapped = run(args, broker, database, Path(tmp))
                late[mode].extend(values)
                overlaps += overlapped
                p99[mode] = percentile(values, 0.99)
                print(
                    f"round {round_number + 1} {mode:8} {summary(values)}  "
                    f"{time.monotonic() - started:.0f}s  load {load_average()}"
                    + (f"  ({overlapped} due during the first attempts)" if overlapped else ""),
                    flush=True,
                )
            ratios.append(p99_ratio(p99["toolsafe"], p99["plain"]))
            print(f"round {round_number + 1} p99 toolsafe / plain: {ratios[-1]:.2f}x", flush=True)
    print("\nlateness, all rounds (claim of the retry - due_at; plain: the 2nd run's start - eta):")
    print(f"  plain Celery, eta task   {summary(late['plain'])}")
    print(f"  toolsafe retry           {summary(late['toolsafe'])}")
    ratio = p99_ratio(percentile(late["toolsafe"], 0.99), percentile(late["plain"], 0.99))
    verdict = "met" if ratio <= P99_TARGET else "NOT met"
    print(f"\np99 toolsafe / plain Celery, all rounds pooled: {ratio:.2f}x")
    if len(ratios) > 1:
        shown = ", ".join(f"{value:.2f}" for value in ratios)
        print(f"  round by round: {shown} (median {statistics.median(ratios):.2f}x)")
    print(f"eta lateness p99 <= {P99_TARGET}x plain Celery: {verdict}")
    if overlaps:
        print(
            f"  ({overlaps} toolsafe retries came due while its first attempts still ran: "
            "a raised --min-delay measures the ETAs alone)"
        )
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
