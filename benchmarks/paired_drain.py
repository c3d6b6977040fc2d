"""The drain ratio, paired: toolsafe and the hand-rolled task drain short chunks in turn.

``python -m benchmarks.throughput`` drains each mode once per round, ten seconds or more
apart; on a machine whose cores change speed from minute to minute (docs/benchmarks.md)
its ratio swings by a third between rounds of the same code. This program starts both
workers once and lets them drain alternately: for each of ``--chunks`` chunks, each
mode's queue is filled with ``--chunk`` calls while its worker does not consume, then
the worker is let loose and timed until the queue is drained and the database agrees.
The order alternates chunk by chunk, so a slow or fast stretch of the machine falls on
both alike. It prints each chunk's ratio, their median and the pooled ratio (all of
toolsafe's calls over all of its drain time, against the same for the hand-rolled task).

``python -m benchmarks.paired_drain --chunks 10 --chunk 300`` (about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

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
    wait_worker_ready,
    worker_env,
)
from benchmarks.throughput import LABELS, Target, node_host, run_batch

MODES = ("rows", "toolsafe")


class Paired:
    """One mode's target and worker, held stopped between its chunks."""

    def __init__(self, target: Target, node: str) -> None:
        self.target = target
        self.destination = [node]
        self.seconds = 0.0
        self.calls = 0

    def drain(self, broker: BrokerDb, database: BenchDatabase, count: int) -> float:
        """Fill the stopped queue with ``count`` calls, let the worker loose, time it,
        stop it again: the chunk's seconds."""
        started, _, finished = run_batch(
            self.target,
            broker,
            database,
            count,
            before_wait=lambda: self.target.resume(self.destination),
        )
        self.target.stop(self.destination)
        seconds = finished - started
        self.seconds += seconds
        self.calls += count
        return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.paired_drain",
        description="The drain ratio of toolsafe to the hand-rolled task, in alternating chunks.",
    )
    parser.add_argument("--chunks", type=int, default=10, help="chunks drained by each mode")
    parser.add_argument("--chunk", type=int, default=300, help="calls per chunk")
    parser.add_argument("--warmup", type=int, default=50, help="calls per mode before measuring")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--call-ms", type=float, default=1.0, help="the stand-in call's time")
    parser.add_argument("--loglevel", default="INFO", help="the workers' log level")
    add_service_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.chunks < 1 or args.chunk < 1 or args.warmup < 0:
        raise BenchError("--chunks and --chunk must be at least 1, --warmup at least 0")
    header(
        f"paired drain: {args.chunks} chunks of {args.chunk} calls per mode, pool prefork "
        f"x{args.concurrency}, call {args.call_ms:g} ms, log level {args.loglevel}"
    )
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-paired-") as tmp,
        ExitStack() as stack,
    ):
        database.execute(baseline.CALLS_TABLE_DDL)
        broker.clear()
        env = worker_env(broker.url, database.url)
        paired: dict[str, Paired] = {}
        for mode in MODES:
            target = Target(mode, env, args.call_ms)
            stack.callback(target.close)
            started = start_worker(
                target.app_name,
                target.queues,
                env=env,
                directory=Path(tmp),
                name=mode,
                concurrency=args.concurrency,
                loglevel=args.loglevel,
            )
            worker = stack.enter_context(started)
            node = f"{worker.name}@{node_host()}"
            wait_worker_ready(worker, target.app, node, args.loglevel)
            paired[mode] = Paired(target, node)
            if args.warmup:
                run_batch(target, broker, database, args.warmup)
            target.stop([node])
        ratios: list[float] = []
        for number in range(args.chunks):
            order = MODES if number % 2 == 0 else MODES[::-1]
            seconds = {mode: paired[mode].drain(broker, database, args.chunk) for mode in order}
            # Steps per second of toolsafe over the hand-rolled task's, same chunk size.
            ratio = seconds["rows"] / seconds["toolsafe"]
            ratios.append(ratio)
            print(
                f"chunk {number + 1:2} ({order[0]:8} first)  "
                f"rows {args.chunk / seconds['rows']:7.1f}/s  "
                f"toolsafe {args.chunk / seconds['toolsafe']:7.1f}/s  ratio {ratio:5.2f}x"
                f"  load {load_average()}",
                flush=True,
            )
    rows, tool = paired["rows"], paired["toolsafe"]
    pooled = (tool.calls / tool.seconds) / (rows.calls / rows.seconds)
    print()
    print(f"{LABELS['rows']:40} {rows.calls / rows.seconds:8.1f} steps/s drained")
    print(f"{LABELS['toolsafe']:40} {tool.calls / tool.seconds:8.1f} steps/s drained")
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(
        f"drain toolsafe / hand-rolled: pooled {pooled:.2f}x, chunk median "
        f"{statistics.median(ratios):.2f}x (quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}x, "
        f"{len(ratios)} chunks); target >= 1.0x {'met' if pooled >= 1.0 else 'NOT met'}"
    )
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
