"""``toolsafe workers``: the workers' heartbeats in the store, and a readiness check.

Exit 0 when a worker consumes (with ``--node``: that one), 1 when none does; a container
probe of a worker runs ``toolsafe workers --node worker@$HOSTNAME`` (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from toolsafe.cli.exits import EXIT_REFUSED


def add_parser(commands: Any) -> None:
    workers = commands.add_parser(
        "workers",
        help="list the workers' heartbeats; exit 1 when no worker (or not --node) consumes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    workers.add_argument(
        "--node", default=None, metavar="NAME",
        help="check this node only (Celery's node name, e.g. worker@host)",
    )  # fmt: skip
    workers.add_argument("--json", action="store_true", help="print JSON instead of text")
    workers.set_defaults(handler=workers_command)


def workers_command(args: argparse.Namespace) -> int:
    from toolsafe.recovery.store import open_store
    from toolsafe.tasks.runtime import utcnow

    settings = args.settings
    backend = open_store(settings.store.url)
    try:
        beats = backend.workers.all()
        # Heartbeats are stamped by the database's clock: judged by it too.
        same = not backend.has("clock") or backend.clock.same_host
        now = utcnow() if same else backend.clock.database_time()
    finally:
        backend.close()
    if args.node is not None:
        beats = [beat for beat in beats if beat.name == args.node]
    alive = [beat for beat in beats if beat.alive(now, settings.calls.lease)]
    if args.json:
        rows = [
            {
                "name": beat.name,
                "pid": beat.pid,
                "queues": list(beat.queues),
                "started_at": beat.started_at.isoformat(),
                "last_seen": beat.last_seen.isoformat(),
                "alive": beat in alive,
            }
            for beat in beats
        ]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for beat in beats:
            age = (now - beat.last_seen).total_seconds()
            status = "consuming" if beat in alive else "stale (no heartbeat within a lease)"
            sys.stdout.write(f"{beat.name:<40} pid {beat.pid:<8} seen {age:5.1f}s ago  {status}\n")
        if not alive:
            which = f"worker {args.node!r}" if args.node else "worker"
            sys.stdout.write(f"no {which} is consuming\n")
    return 0 if alive else EXIT_REFUSED
