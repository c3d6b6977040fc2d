"""``toolsafe metrics``: the one store-wide exporter, serving ``/metrics`` until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def add_parser(commands: Any) -> None:
    metrics = commands.add_parser(
        "metrics",
        help="serve the store-wide Prometheus metrics (run one per store)",
        description="Reads the event log once, then folds new events every "
        "TOOLSAFE_METRICS_POLL_INTERVAL seconds; a scrape costs the same at any table size.",
    )
    metrics.add_argument(
        "--address", default=None, help="address to bind (default TOOLSAFE_METRICS_ADDRESS)"
    )
    metrics.add_argument(
        "--port", type=int, default=None, help="port to bind (default TOOLSAFE_METRICS_PORT)"
    )
    metrics.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from toolsafe.metrics.exporter import Exporter, serve
    from toolsafe.recovery.store import open_store

    settings = args.settings
    port = args.port if args.port is not None else settings.metrics.port
    address = args.address or settings.metrics.address
    if port is None:
        sys.stderr.write("toolsafe: error: give --port or set TOOLSAFE_METRICS_PORT\n")
        return 2
    if not 0 <= port <= 65535:
        sys.stderr.write(f"toolsafe: error: --port must be between 0 and 65535, got {port}\n")
        return 2
    backend = open_store(settings.store.url)
    try:
        tally = backend.tally  # a store without the event log's reading refuses here
    except BaseException:
        backend.close()
        raise
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        served = serve(Exporter.from_settings(settings, tally), address, port)
    except OSError as error:
        backend.close()
        sys.stderr.write(f"toolsafe: error: cannot listen on {address}:{port}: {error}\n")
        return 2
    sys.stdout.write(f"metrics on http://{address}:{served.port}/metrics\n")
    sys.stdout.flush()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        served.close()
        backend.close()
    return 0
