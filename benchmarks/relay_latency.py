"""What the hint relay adds to a call's latency: a submit published by its submitter
against one published by a worker's relay (``TOOLSAFE_SUBMIT_HINTS=relay``).

``python -m benchmarks.relay_latency --calls 300`` starts one toolsafe worker with the
relay on (it publishes only the hints of steps stored unsent, so it leaves the direct
submitter's alone) and two clients on the same broker and store: one publishing its
hints itself (the default), one leaving them to the relay. They call the 1 ms
``bench_write`` tool one at a time, alternating call by call, so a slow stretch of the
machine falls on both alike. For each call it reads:

- the wait: from the start of ``submit`` to ``wait`` returning the succeeded step (the
  caller's whole latency, the submit's own time included);
- submit → claim: the ``claimed`` event's time minus the ``submitted`` event's, both
  the database's clock (how long the hint took to reach a worker).

It prints p50, p95 and p99 of each for both paths, and the relay's difference.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    RELAY,
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
from benchmarks.gateway import percentile
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import QUEUES
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

PATHS = ("direct", "relay")


def claim_delay(client: Client, operation_ref: str) -> float:
    """Seconds from the step's ``submitted`` event to its ``claimed`` one."""
    events = client.runtime.store.events(operation_ref)
    at = {event.kind: event.at for event in events}
    if "submitted" not in at or "claimed" not in at:
        raise BenchError(f"{operation_ref}: no submitted or claimed event ({sorted(at)})")
    return (at["claimed"] - at["submitted"]).total_seconds()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.relay_latency", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--calls", type=int, default=300, help="calls per path")
    parser.add_argument("--warmup", type=int, default=20, help="calls per path first")
    add_service_options(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 0:
        raise BenchError("--calls must be at least 1, --warmup at least 0")
    header(f"relay latency: {args.calls} calls per path, one at a time, alternating")
    waits: dict[str, list[float]] = {path: [] for path in PATHS}
    claims: dict[str, list[float]] = {path: [] for path in PATHS}
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-bench-relay-") as tmp,
    ):
        relay_env = worker_env(broker.url, database.url, RELAY)
        clients = {
            "direct": Client(create_app(Settings.from_env(worker_env(broker.url, database.url)))),
            "relay": Client(create_app(Settings.from_env(relay_env))),
        }
        worker = start_worker(
            "toolsafe", list(QUEUES), env=relay_env, directory=Path(tmp), name="relay"
        )
        prefix = f"r{uuid.uuid4().hex[:6]}/"
        try:
            with worker:
                wait_worker_ready(worker, clients["relay"].app, "", "INFO")
                for index in range(args.warmup + args.calls):
                    order = PATHS if index % 2 == 0 else PATHS[::-1]
                    for path in order:
                        client = clients[path]
                        ref = f"{prefix}{path}/{index}"
                        began = time.perf_counter()
                        client.submit(TOOL, {"n": index, "call_ms": 1}, operation_ref=ref)
                        view = client.wait(ref, timeout=30)
                        took = time.perf_counter() - began
                        if str(view.state) != "succeeded":
                            raise BenchError(f"{ref} ended {view.state}, not succeeded")
                        if index >= args.warmup:
                            waits[path].append(took)
                            claims[path].append(claim_delay(client, ref))
        finally:
            for client in clients.values():
                client.close()
    print(f"\n{'path':8} {'what':16} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for path in PATHS:
        for name, values in (("submit → wait", waits[path]), ("submit → claim", claims[path])):
            shown = " ".join(f"{percentile(values, q) * 1000:8.2f}" for q in (0.5, 0.95, 0.99))
            print(f"{path:8} {name:16} {shown}")
    print("\nthe relay's difference (relay - direct):")
    for name, by_path in (("submit → wait", waits), ("submit → claim", claims)):
        differences = (
            (q, percentile(by_path["relay"], q) - percentile(by_path["direct"], q))
            for q in (0.5, 0.95, 0.99)
        )
        shown = "  ".join(f"p{round(q * 100)} {value * 1000:+.2f} ms" for q, value in differences)
        print(f"  {name:16} {shown}")
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
