"""Hints re-sent per broker restart against the hints the broker lost.

``python -m benchmarks.lost_hints --steps 80 --rounds 2`` starts a ``redis-server`` of
its own (no persistence; ``--broker`` is not used: the shared Redis is never restarted)
and commits to a PostgreSQL database of its own; no worker runs, so the hints the broker
holds when it is killed are exactly the ones it loses. Each round:

1. submit ``--steps`` steps (their hints wait in the broker);
2. a quiet spell: sweeps every ``--interval`` seconds for 1.5 times
   ``TOOLSAFE_REPUBLISH_AFTER`` (``--republish-after``), no fault: hints re-sent = what
   the broker holds beyond the submits;
3. ``kill -9`` of the server and a start on the same port (every hint lost);
4. sweeps every ``--interval`` seconds until ``--recover`` seconds have passed: hints
   re-sent = what the broker holds then;
5. the round's steps cancelled and their hints deleted, so the next round counts only
   its own.

Rounds alternate the sweeper's two rules: the marker (the broker's ``run_id`` in a key
the broker loses with its hints, ``tasks/broker_watch.py``) and the time rule it
replaces (re-send what was published ``republish_after`` ago while at most a sweep
batch waits). Targets: 0 re-sent without a fault, re-sent per restart <= 1.1x lost (and
>= 1.0x: every lost hint back).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from benchmarks.common import (
    BenchDatabase,
    BenchError,
    add_service_options,
    header,
    load_average,
    run_main,
    worker_env,
)
from benchmarks.noop_adapter import TOOL
from toolsafe.harness import flush_broker
from toolsafe.harness.redis_server import RedisServer
from toolsafe.settings import Settings
from toolsafe.tasks import sweeper
from toolsafe.tasks.app import create_app
from toolsafe.tasks.broker_watch import MARKER_KEY, RedisBrokerWatch
from toolsafe.tasks.client import Client

RESENT_TARGET: Final = 1.1
BATCH: Final = 100


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.lost_hints", description=__doc__.split("\n\n")[0]
    )
    # Below a sweep batch by default: the time rule re-sends a backlog that small.
    parser.add_argument("--steps", type=int, default=80, help="steps waiting per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per rule")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between sweeps")
    parser.add_argument("--recover", type=float, default=6.0, help="seconds of sweeps after")
    parser.add_argument(
        "--republish-after",
        type=float,
        default=2.0,
        help="the time rule's TOOLSAFE_REPUBLISH_AFTER, seconds; the quiet spell is 1.5 times it",
    )
    add_service_options(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.interval <= 0 or args.republish_after <= 0:
        raise BenchError(
            "--steps and --rounds must be at least 1, --interval and --republish-after positive"
        )
    header(
        f"lost hints: {args.steps} steps waiting, {args.rounds} hard restarts per rule, "
        f"sweep batch {BATCH}, republish_after {args.republish_after:g} s"
    )
    results: dict[str, list[tuple[int, int, int]]] = {"marker": [], "time rule": []}
    with (
        tempfile.TemporaryDirectory(prefix="toolsafe-lost-") as workdir,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        server = RedisServer(Path(workdir))
        server.start()
        extra = {
            "TOOLSAFE_SWEEP_BATCH": str(BATCH),
            "TOOLSAFE_REPUBLISH_AFTER": str(args.republish_after),
        }
        settings = Settings.from_env(worker_env(server.url(1), database.url, extra))
        client = Client(create_app(settings))
        publisher = client.app.publisher
        try:
            for number in range(2 * args.rounds):
                rule = "marker" if number % 2 == 0 else "time rule"
                watch = publisher.watch if rule == "marker" else None

                def sweeps(seconds: float, watch: RedisBrokerWatch | None = watch) -> None:
                    ends = time.monotonic() + seconds
                    while time.monotonic() < ends:
                        sweeper.sweep(client.runtime, publisher, publisher.backlog, watch)
                        time.sleep(args.interval)

                prefix = f"l{uuid.uuid4().hex[:6]}/"
                refs = [f"{prefix}{i}" for i in range(args.steps)]
                for i, ref in enumerate(refs):
                    client.submit(TOOL, {"n": i, "call_ms": 0}, operation_ref=ref)
                sweeps(1.5 * args.republish_after)
                quiet = (publisher.backlog() or 0) - args.steps
                server.restart()
                lost = args.steps  # every hint the broker held
                sweeps(args.recover)
                resent = publisher.backlog() or 0
                results[rule].append((quiet, lost, resent))
                print(
                    f"  round {number + 1} ({rule:9}): re-sent without a fault {quiet:5d}; "
                    f"lost {lost:5d}, re-sent after the restart {resent:5d} "
                    f"({resent / lost:4.2f}x)  load {load_average()}"
                )
                for ref in refs:
                    client.cancel(ref, "benchmark round over")
                # The cancelled steps' hints out of the way (the marker stays: this is
                # the benchmark's clean-up, not a loss the sweeper should see).
                flush_broker(server.url(1), keep=(MARKER_KEY,))
        finally:
            client.close()
            server.stop()
    print("\ntargets (the marker's rounds):")
    marker = results["marker"]
    worst_quiet = max(quiet for quiet, _, _ in marker)
    ratios = [resent / lost for _, lost, resent in marker]
    print(
        f"  hints re-sent in a run without faults   {worst_quiet:5d}   (target 0)  "
        f"{verdict(worst_quiet == 0)}"
    )
    print(
        f"  re-sent / lost per broker restart       {max(ratios):5.2f}x (target <= "
        f"{RESENT_TARGET}x, every lost hint back)  "
        f"{verdict(max(ratios) <= RESENT_TARGET and min(ratios) >= 1.0)}"
    )
    old = results["time rule"]
    print(
        "  (the time rule, same rounds: re-sent without a fault "
        f"{max(q for q, _, _ in old)}, after a restart "
        + ", ".join(f"{resent}/{lost}" for _, lost, resent in old)
        + ")"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
