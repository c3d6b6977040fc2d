"""The client's cost: one ``submit`` against a plain ``send_task``, and ``submit_many``.

``python -m benchmarks.submit_cost --calls 2000`` runs no worker: it publishes to a Redis
database of its own (cleared as it goes) and commits to a PostgreSQL database of its own.
Interleaved in chunks, so the machine's changing load falls on every mode alike:

- ``send_task``: a plain Celery publish of the same hint (the baseline);
- ``submit``: toolsafe's submit (one transaction: step and event; then the publish);
- ``submit, the relay``: the same with ``TOOLSAFE_SUBMIT_HINTS=relay``, the commit alone
  (a worker's hint relay publishes the hint; none runs here);
- ``submit_many``: batches of ``--batch`` calls (one transaction, one producer).

It prints each target's ratio and whether it is met: submit at most 1.5x ``send_task``,
``submit_many`` at least 2,000 steps/s from this one thread.

Then ``--agents`` (32) threads submit at once, ``--agent-calls`` each: in this process
through one ``Client``, and through ``toolsafe serve`` (one ``GatewayClient`` per agent,
a real key), each with the group commit off (``TOOLSAFE_SUBMIT_WINDOW=0``, the old
behaviour), on (the default window), and on with the relay: calls accepted per second
and the p99 of one call. Target through the gateway: >= 1,000 calls/s accepted, p99 <=
20 ms.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from benchmarks.common import (
    RELAY,
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
    worker_env,
)
from benchmarks.gateway import _sql, gateway, percentile
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import EXECUTE_TASK
from toolsafe.gateway.client import GatewayClient
from toolsafe.recovery.store.sql.keys import KeyStore
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client, ToolCall
from toolsafe.tasks.runtime import utcnow

CHUNK: Final = 100
SUBMIT_TARGET: Final = 1.5
BATCH_TARGET: Final = 2000.0
GATEWAY_RATE_TARGET: Final = 1000.0
GATEWAY_P99_TARGET: Final = 0.020


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.submit_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per mode")
    parser.add_argument("--batch", type=int, default=100, help="calls per submit_many")
    parser.add_argument("--agents", type=int, default=32, help="concurrent submitters (0: none)")
    parser.add_argument("--agent-calls", type=int, default=40, help="submits per agent")
    add_service_options(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.batch < 1 or args.agents < 0 or args.agent_calls < 1:
        raise BenchError("--calls, --batch and --agent-calls must be at least 1, --agents >= 0")
    header(f"submit cost: {args.calls} calls per mode, submit_many batches of {args.batch}")
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        client = Client(create_app(Settings.from_env(worker_env(broker.url, database.url))))
        relayed = Client(create_app(Settings.from_env(worker_env(broker.url, database.url, RELAY))))
        app = client.app
        prefix = f"s{uuid.uuid4().hex[:6]}/"

        def send(i: int) -> None:
            app.send_task(EXECUTE_TASK, args=(f"{prefix}plain/{i}",))

        def submit(i: int) -> None:
            client.submit(TOOL, {"n": i, "call_ms": 0}, operation_ref=f"{prefix}one/{i}")

        def submit_relayed(i: int) -> None:
            relayed.submit(TOOL, {"n": i, "call_ms": 0}, operation_ref=f"{prefix}relay/{i}")

        def submit_many(start: int, count: int) -> None:
            calls = [
                ToolCall(TOOL, {"n": i, "call_ms": 0}, f"{prefix}many/{i}")
                for i in range(start, start + count)
            ]
            for first in range(0, len(calls), args.batch):
                client.submit_many(calls[first : first + args.batch])

        seconds = {"send_task": 0.0, "submit": 0.0, "submit, the relay": 0.0, "submit_many": 0.0}

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
            submit_relayed(args.calls)
            submit_many(args.calls, args.batch)
            for start in range(0, args.calls, CHUNK):
                count = min(CHUNK, args.calls - start)
                timed("send_task", each(send), start, count)
                timed("submit", each(submit), start, count)
                timed("submit, the relay", each(submit_relayed), start, count)
                timed("submit_many", submit_many, start, count)
                broker.clear()  # no worker: the hints are dropped as they pile up
        finally:
            client.close()
            relayed.close()
        concurrent = (
            run_concurrent(args.agents, args.agent_calls, broker, database) if args.agents else {}
        )
    per_call = {name: value / args.calls * 1000 for name, value in seconds.items()}
    print(f"\n{'mode':40} {'ms/call':>8} {'calls/s':>9}")
    for name, ms in per_call.items():
        label = f"{name} (batches of {args.batch})" if name == "submit_many" else name
        print(f"{label:40} {ms:8.3f} {1000 / ms:9.0f}")
    rate = 1000 / per_call["submit_many"]
    print("\ntargets:")
    for name in ("submit", "submit, the relay"):
        ratio = per_call[name] / per_call["send_task"]
        print(
            f"  {name + ' / plain send_task':36} {ratio:5.2f}x  (target <= {SUBMIT_TARGET}x)  "
            f"{verdict(ratio <= SUBMIT_TARGET)}"
        )
    print(
        f"  {'submit_many from one thread':36} {rate:5.0f}/s (target >= {BATCH_TARGET:.0f}/s)  "
        f"{verdict(rate >= BATCH_TARGET)}"
    )
    if concurrent:
        print(f"\n{args.agents} agents at once, {args.agent_calls} submits each:")
        print(f"  {'path':40} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for name, (rate, p50, p99) in concurrent.items():
            print(f"  {name:40} {rate:9.0f} {p50 * 1000:8.2f} {p99 * 1000:8.2f}")
        for label in ("shared commits", "shared commits, the relay"):
            rate, _, p99 = concurrent[f"gateway, {label}"]
            print(
                f"  gateway, {args.agents} agents, {label}: {rate:5.0f} calls/s (target >= "
                f"{GATEWAY_RATE_TARGET:.0f}), p99 {p99 * 1000:.1f} ms (target <= "
                f"{GATEWAY_P99_TARGET * 1000:.0f})  "
                f"{verdict(rate >= GATEWAY_RATE_TARGET and p99 <= GATEWAY_P99_TARGET)}"
            )
    print(f"load average at the end: {load_average()}")
    return 0


def hammer(agents: int, calls: int, submit: Callable[[int, int], None]) -> tuple[float, ...]:
    """``agents`` threads, ``calls`` submits each, started together: (calls/s, p50, p99)."""
    start = threading.Barrier(agents + 1)
    timings: list[list[float]] = [[] for _ in range(agents)]
    failures: list[BaseException] = []

    def agent(number: int) -> None:
        start.wait()
        try:
            for index in range(calls):
                began = time.perf_counter()
                submit(number, index)
                timings[number].append(time.perf_counter() - began)
        except Exception as error:
            failures.append(error)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(agents)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise BenchError(f"{len(failures)} agents failed; the first: {failures[0]!r}")
    every = [value for one in timings for value in one]
    return len(every) / elapsed, percentile(every, 0.5), percentile(every, 0.99)


def run_concurrent(
    agents: int, calls: int, broker: BrokerDb, database: BenchDatabase
) -> dict[str, tuple[float, ...]]:
    """Concurrent submits in process and through the gateway, group commit off and on."""
    results: dict[str, tuple[float, ...]] = {}
    for label, extra in (
        ("one commit each", {"TOOLSAFE_SUBMIT_WINDOW": "0"}),
        ("shared commits", {}),
        ("shared commits, the relay", RELAY),
    ):
        env = worker_env(broker.url, database.url, extra)
        client = Client(create_app(Settings.from_env(env)))
        prefix = f"c{uuid.uuid4().hex[:6]}/"
        try:
            client.submit(TOOL, {"n": 0, "call_ms": 0}, operation_ref=f"{prefix}warm")

            def local(agent: int, index: int, prefix: str = prefix, one: Client = client) -> None:
                one.submit(TOOL, {"n": index, "call_ms": 0}, f"{prefix}in/{agent}/{index}")

            results[f"in process, {label}"] = hammer(agents, calls, local)
            broker.clear()
            token = (
                KeyStore(_sql(client.runtime.store).engine)
                .create(f"agents-{prefix.rstrip('/')}", "agent", None, now=utcnow())
                .token
            )
            with (
                tempfile.TemporaryDirectory(prefix="toolsafe-bench-submit-") as folder,
                gateway(env, Path(folder)) as served,
            ):
                remotes = [GatewayClient(served.url, token, timeout=30) for _ in range(agents)]
                try:
                    for remote in remotes:  # connections open before the clock starts
                        remote.submit(TOOL, {"n": 0, "call_ms": 0}, f"{prefix}w/{id(remote)}")

                    def over_http(
                        agent: int,
                        index: int,
                        prefix: str = prefix,
                        remotes: list[GatewayClient] = remotes,
                    ) -> None:
                        remotes[agent].submit(
                            TOOL, {"n": index, "call_ms": 0}, f"{prefix}gw/{agent}/{index}"
                        )

                    results[f"gateway, {label}"] = hammer(agents, calls, over_http)
                finally:
                    for remote in remotes:
                        remote.close()
            broker.clear()
        finally:
            client.close()
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
