"""The client's cost: one ``submit`` against a plain ``send_task``, and ``submit_many``.

``python -m benchmarks.submit_cost --calls 2000`` runs no worker: it publishes to a Redis
database of its own (cleared as it goes) and commits to a PostgreSQL database of its own.
Interleaved in chunks, so the machine's changing load falls on every mode alike:

- ``send_task``: a plain Celery publish of the same hint (the baseline);
- ``submit``: toolsafe's submit (one transaction: step and event; then the publish);
- ``submit_many``: batches of ``--batch`` calls (one transaction, one producer).

It prints each target's ratio and whether it is met: submit at most 1.5x ``send_task``,
``submit_many`` at least 2,000 steps/s from this one thread.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from benchmarks.common import (
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
from toolsafe.celeryconfig import EXECUTE_TASK
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client, ToolCall

CHUNK: Final = 100
SUBMIT_TARGET: Final = 1.5
BATCH_TARGET: Final = 2000.0


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.submit_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per mode")
    parser.add_argument("--batch", type=int, default=100, help="calls per submit_many")
    add_service_options(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.batch < 1:
        raise BenchError("--calls and --batch must be at least 1")
    header(f"submit cost: {args.calls} calls per mode, submit_many batches of {args.batch}")
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        client = Client(create_app(Settings.from_env(worker_env(broker.url, database.url))))
        app = client.app
        prefix = f"s{uuid.uuid4().hex[:6]}/"

        def send(i: int) -> None:
            app.send_task(EXECUTE_TASK, args=(f"{prefix}plain/{i}",))

        def submit(i: int) -> None:
            client.submit(TOOL, {"n": i, "call_ms": 0}, operation_ref=f"{prefix}one/{i}")

        def submit_many(start: int, count: int) -> None:
            calls = [
                ToolCall(TOOL, {"n": i, "call_ms": 0}, f"{prefix}many/{i}")
                for i in range(start, start + count)
            ]
            for first in range(0, len(calls), args.batch):
                client.submit_many(calls[first : first + args.batch])

        seconds = {"send_task": 0.0, "submit": 0.0, "submit_many": 0.0}

        def timed(name: str, body: Callable[[int, int], None], start: int, count: int) -> None:
            started = time.perf_counter()
            body(start, count)
            seconds[name] += time.perf_counter() - started

        def each(one: Callable[[int], None]) -> Callable[[int, int], None]:
            def body(start: int, count: int) -> None:
                for i in range(start, start + count):
                    one(i)

            return body

        try:
            send(args.calls)  # warm every path
            submit(args.calls)
            submit_many(args.calls, args.batch)
            for start in range(0, args.calls, CHUNK):
                count = min(CHUNK, args.calls - start)
                timed("send_task", each(send), start, count)
                timed("submit", each(submit), start, count)
                timed("submit_many", submit_many, start, count)
                broker.clear()  # no worker: the hints are dropped as they pile up
        finally:
            client.close()
    per_call = {name: value / args.calls * 1000 for name, value in seconds.items()}
    print(f"\n{'mode':40} {'ms/call':>8} {'calls/s':>9}")
    for name, ms in per_call.items():
        label = f"{name} (batches of {args.batch})" if name == "submit_many" else name
        print(f"{label:40} {ms:8.3f} {1000 / ms:9.0f}")
    ratio = per_call["submit"] / per_call["send_task"]
    rate = 1000 / per_call["submit_many"]
    print("\ntargets:")
    print(
        f"  submit / plain send_task      {ratio:5.2f}x  (target <= {SUBMIT_TARGET}x)  "
        f"{verdict(ratio <= SUBMIT_TARGET)}"
    )
    print(
        f"  submit_many from one thread   {rate:5.0f}/s (target >= {BATCH_TARGET:.0f}/s)  "
        f"{verdict(rate >= BATCH_TARGET)}"
    )
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
