"""The gateway's cost and the push path's speed, measured side by side in one run.

``python -m benchmarks.gateway`` prints:

1. submit-and-wait of a 1 ms tool (``bench_write``), one call after the other, through the
   in-process ``Client`` and through ``toolsafe serve`` with ``GatewayClient`` (one
   keep-alive connection, a real key): p50 and p99 of each and the p50 difference
   (target: the gateway adds at most 2 ms); and, without a worker's latency in it, the
   view of a finished step both ways (the cost of one request through the gateway);
2. notification latency from a step's commit to its waiter: the change feed's wake-up
   and ``Client.wait``'s return (LISTEN/NOTIFY), against the polling loop ``Client.wait``
   ran before (50 ms, x1.5, at most 1 s), for the same changes at random moments
   (target on PostgreSQL: p50 <= 5 ms, p99 <= 50 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

import httpx
from sqlalchemy import event

from benchmarks.common import (
    ROOT,
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    run_main,
    start_worker,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.celeryconfig import QUEUES
from toolsafe.gateway.client import GatewayClient
from toolsafe.harness import Process, free_port, spawn
from toolsafe.recovery.states import NEEDS_AGENT, StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.feed import ChangeFeed
from toolsafe.recovery.store.sql.keys import KeyStore
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client, WaitTimeout
from toolsafe.tasks.runtime import utcnow

OLD_POLL: Final = 0.05
OLD_POLL_MAX: Final = 1.0


def _sql(store: object) -> StepStore:
    """The database store the benchmark runs on (it reads the tables and the feed)."""
    assert isinstance(store, StepStore)
    return store


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def show(label: str, seconds: Sequence[float]) -> str:
    ms = [value * 1000 for value in seconds]
    return (
        f"  {label:<44} p50 {percentile(ms, 0.5):8.2f} ms   p99 {percentile(ms, 0.99):8.2f} ms"
        f"   (n={len(ms)})"
    )


class Served(NamedTuple):
    """A running ``toolsafe serve``: where it answers, and its process."""

    url: str
    pid: int


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (Linux ``/proc``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def gateway(env: Mapping[str, str], directory: Path) -> Iterator[Served]:
    """``toolsafe serve`` in a process group of its own (``harness.spawn``), SIGKILLed at
    the end."""
    port = free_port()
    argv = [sys.executable, "-m", "toolsafe", "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with spawn("gateway", argv, env=env, directory=directory, cwd=ROOT) as process:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if not process.alive() or time.monotonic() > deadline:
                raise BenchError(f"the gateway did not start:\n{process.tail()}")
            time.sleep(0.05)
        yield Served(url, process.pid)


def stuck(client: Client, ref: str, broker_url: str, worker: Process) -> str:
    """What a step that never finished leaves to read: its events, who is connected to
    the broker's database (a consumer that is not this run's worker takes hints it
    cannot run), and the worker's log."""
    import redis

    events = [f"{e.kind} {e.from_state}->{e.to_state}" for e in client.runtime.store.events(ref)]
    broker = redis.Redis.from_url(broker_url)
    db = broker.connection_pool.connection_kwargs.get("db", 0)
    try:
        clients = [
            f"{c.get('addr')} name={c.get('name') or '-'} cmd={c.get('cmd')}"
            for c in broker.client_list()
            if str(c.get("db")) == str(db)
        ]
    finally:
        broker.close()
    log = worker.log_path.read_text(errors="replace")[-3000:]
    return (
        f"{ref} did not finish within 30 s; its events: {events}\n"
        f"connected to the broker's db {db}: {clients}\nthe worker's log:\n{log}"
    )


def submit_and_wait(
    calls: int, warmup: int, call_ms: float, run: Callable[[str, dict[str, Any]], StepState]
) -> list[float]:
    timings = []
    for index in range(warmup + calls):
        ref = f"bench/gw/{os.getpid()}/{time.time_ns()}/{index}"
        started = time.perf_counter()
        state = run(ref, {"n": index, "call_ms": call_ms})
        elapsed = time.perf_counter() - started
        if state is not StepState.SUCCEEDED:
            raise BenchError(f"{ref} ended {state}, not succeeded")
        if index >= warmup:
            timings.append(elapsed)
    return timings


class CommitClock:
    """The moment just before each COMMIT the changing client sends."""

    def __init__(self, store: StepStore) -> None:
        self.at = 0.0
        event.listen(store.engine, "commit", self._commit)

    def _commit(self, _conn: Any) -> None:
        self.at = time.perf_counter()


def old_wait(store: StepStore, client: Client, ref: str) -> None:
    """``Client.wait`` as it was: read, sleep 50 ms growing x1.5 up to 1 s, read again."""
    interval = OLD_POLL
    while True:
        if store.get(ref).state in NEEDS_AGENT:
            client.view(ref)
            return
        time.sleep(interval)
        interval = min(interval * 1.5, OLD_POLL_MAX)


def notification_latency(
    waiter: Client, changer: Client, samples: int, rng: random.Random
) -> dict[str, list[float]]:
    store = waiter.runtime.store
    clock = CommitClock(_sql(changer.runtime.store))
    policy = waiter.runtime.policy_for(TOOL)
    feed = waiter.runtime.feed
    assert isinstance(feed, ChangeFeed)
    feed.subscribe("warm-up").close()
    if feed.listens and not feed.connected.wait(10):
        raise BenchError("the change feed did not connect")
    found: dict[str, list[float]] = {"wake": [], "push": [], "poll": []}
    for mode in ("push", "poll"):
        for index in range(samples):
            ref = f"bench/notify/{mode}/{time.time_ns()}/{index}"
            store.submit(TOOL, {"n": index}, operation_ref=ref, policy=policy, now=utcnow())
            woke: dict[str, float] = {}

            def wait(ref: str = ref, woke: dict[str, float] = woke, mode: str = mode) -> None:
                if mode == "poll":
                    old_wait(_sql(store), waiter, ref)
                    woke["done"] = time.perf_counter()
                    return
                with feed.subscribe(ref) as changes:
                    while store.get(ref).state not in NEEDS_AGENT:
                        changes.wait(30)
                        # The last wake-up is the one for the change (an earlier one may
                        # be the notice of the step's own submit, arriving late).
                        woke["wake"] = time.perf_counter()
                    waiter.view(ref)
                    woke["done"] = time.perf_counter()

            thread = threading.Thread(target=wait)
            thread.start()
            # The change comes at a random moment, as a worker's commit would.
            time.sleep(rng.uniform(0.05, 0.6))
            changer.runtime.store.cancel(
                ref, by="bench", reason="bench", now=utcnow(), **changer._rules(store.get(ref))
            )
            committed = clock.at
            thread.join(30)
            if "done" not in woke:
                raise BenchError(f"the {mode} waiter of {ref} never returned")
            found[mode].append(woke["done"] - committed)
            if mode == "push":
                found["wake"].append(woke["wake"] - committed)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway", description=__doc__)
    add_service_options(parser)
    parser.add_argument("--calls", type=int, default=200, help="submit-and-wait calls per client")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--call-ms", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=100, help="changes per waiting mode")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    header("gateway: submit-and-wait via HTTP vs in-process; commit-to-wake latency")
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
        tempfile.TemporaryDirectory(prefix="toolsafe-bench-gateway-") as folder,
    ):
        directory = Path(folder)
        env = worker_env(broker.url, database.url)
        settings = Settings.from_env(env)
        client = Client(create_app(settings))
        changer = Client(create_app(settings))
        token = (
            KeyStore(_sql(client.runtime.store).engine)
            .create("bench", "operator", None, now=utcnow())
            .token
        )
        worker = start_worker(
            "toolsafe", QUEUES, env=env, directory=directory, name="bench-gw", concurrency=2
        )
        try:
            with worker, gateway(env, directory) as served:
                url = served.url
                worker.wait_ready()

                def in_process(ref: str, data: dict[str, Any]) -> StepState:
                    client.submit(TOOL, data, ref)
                    try:
                        return client.wait(ref, timeout=30).state
                    except WaitTimeout:
                        raise BenchError(stuck(client, ref, broker.url, worker)) from None

                with GatewayClient(url, token, timeout=30) as remote:

                    def over_http(ref: str, data: dict[str, Any]) -> StepState:
                        remote.submit(TOOL, data, ref)
                        try:
                            return remote.wait(ref, timeout=30).state
                        except WaitTimeout:
                            raise BenchError(stuck(client, ref, broker.url, worker)) from None

                    # The gateway's own cost, without a worker's latency in it: a view
                    # of one finished step, in-process and over HTTP, alternately.
                    done = f"bench/gw/view/{time.time_ns()}"
                    in_process(done, {"n": 0, "call_ms": args.call_ms})
                    view_local: list[float] = []
                    view_http: list[float] = []
                    local_cpu = 0.0
                    served_cpu = cpu_seconds(served.pid)
                    for _ in range(args.calls):
                        started, cpu = time.perf_counter(), time.process_time()
                        client.view(done)
                        view_local.append(time.perf_counter() - started)
                        local_cpu += time.process_time() - cpu
                        started = time.perf_counter()
                        remote.view(done)
                        view_http.append(time.perf_counter() - started)
                    # The gateway works only on these requests meanwhile: its CPU per view,
                    # against the same view's CPU in process (robust to a loaded machine).
                    served_cpu = (cpu_seconds(served.pid) - served_cpu) / args.calls
                    local_cpu /= args.calls

                    # Interleaved rounds, so that load changes hit both alike.
                    local: list[float] = []
                    http: list[float] = []
                    rounds = 4
                    for _ in range(rounds):
                        share = max(1, args.calls // rounds)
                        local += submit_and_wait(
                            share, args.warmup // rounds, args.call_ms, in_process
                        )
                        http += submit_and_wait(
                            share, args.warmup // rounds, args.call_ms, over_http
                        )
            print(f"\nsubmit and wait, a {args.call_ms:g} ms tool, one call at a time")
            print(show("in-process Client", local))
            print(show("GatewayClient over HTTP (toolsafe serve)", http))
            extra = (statistics.median(http) - statistics.median(local)) * 1000
            print(f"  gateway adds {extra:+.2f} ms per call at p50 (target <= 2 ms)")
            verdicts = [("the gateway adds to a submit-and-wait at p50 <= 2 ms", extra <= 2.0)]
            print("\nthe view of a finished step (no worker involved)")
            print(show("in-process Client.view", view_local))
            print(show("GatewayClient.view over HTTP", view_http))
            own = (statistics.median(view_http) - statistics.median(view_local)) * 1000
            print(f"  one HTTP request adds {own:+.2f} ms at p50")
            own_cpu = (served_cpu - local_cpu) * 1000
            print(
                f"  CPU per view: the gateway process {served_cpu * 1000:.2f} ms, the view in "
                f"process {local_cpu * 1000:.2f} ms; the gateway's own "
                f"{own_cpu:+.2f} ms (target <= 1 ms)"
            )
            verdicts += [
                ("the gateway's own CPU per view <= 1 ms", own_cpu <= 1.0),
                ("the gateway adds to a view's wall time at p50 <= 1 ms", own <= 1.0),
            ]

            found = notification_latency(client, changer, args.samples, random.Random(args.seed))
            print("\ncommit to waiter, the change at a random moment 50-600 ms into the wait")
            print(show("change feed wake-up (LISTEN/NOTIFY)", found["wake"]))
            print(show("Client.wait returns (push)", found["push"]))
            print(show("Client.wait returns (the old polling loop)", found["poll"]))
            ratio = statistics.median(found["poll"]) / statistics.median(found["push"])
            print(f"  push vs polling at p50: {ratio:.0f}x sooner (target p50 <= 5, p99 <= 50 ms)")
            push = found["push"]
            verdicts.append(
                (
                    "Client.wait returns after a commit: p50 <= 5 ms, p99 <= 50 ms",
                    percentile(push, 0.5) <= 0.005 and percentile(push, 0.99) <= 0.050,
                )
            )
            print()
            for name, met in verdicts:
                print(f"{name}: {'met' if met else 'NOT met'}")
        finally:
            client.close()
            changer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
