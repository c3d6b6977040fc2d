"""The ``toolsafe chaos`` and ``toolsafe stats`` subcommands (wired into ``toolsafe.cli.main``)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from toolsafe.harness.local import LOCAL_PG_ADMIN, LOCAL_REDIS

EXIT_VIOLATIONS = 1


def stats(args: argparse.Namespace) -> int:
    from toolsafe.metrics.exporter import exposition, read_counts
    from toolsafe.recovery.counts import as_json, render
    from toolsafe.recovery.store import open_store

    url = args.database
    if url is None:
        url = args.settings.store.url
    backend = open_store(url)
    try:
        if args.prometheus:
            sys.stdout.write(exposition(backend.tally))
            return 0
        counts = read_counts(backend.steps, args.prefix)
    finally:
        backend.close()
    if args.json:
        sys.stdout.write(json.dumps(as_json(counts), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render(counts) + "\n")
    return 0


def chaos(args: argparse.Namespace) -> int:
    from toolsafe.chaos.plan import ScheduleSize
    from toolsafe.chaos.report import ChaosConfig
    from toolsafe.chaos.run import run

    config = ChaosConfig(
        broker=args.broker,
        database=args.database,
        size=ScheduleSize(
            steps=args.steps,
            kills=args.kills,
            broker_flushes=args.broker_flushes,
            db_kill_rounds=args.db_kill_rounds,
            db_restarts=args.db_restarts,
            redis_restarts=args.redis_restarts,
            partitions=args.partitions,
            failovers=args.failovers,
            duplicates=args.duplicates,
            batch=args.batch,
        ),
        workers=args.workers,
        pool=args.pool,
        concurrency=args.concurrency,
        seed=args.seed,
        batch_interval=args.batch_interval,
        max_in_progress=args.max_in_progress,
        bound=args.bound,
        workdir=Path(args.workdir) if args.workdir else None,
        keep_keys=tuple(args.keep_key or ()),
        pg_restart_command=args.pg_restart_command,
        deduplicating=args.deduplicating_downstream,
        relay=args.hint_relay,
        local_redis=args.local_redis,
        pg_admin=args.pg_admin,
    )
    if config.size.db_restarts and not config.pg_restart_command:
        sys.stderr.write("toolsafe chaos: --db-restarts needs --pg-restart-command\n")
        return 2
    if config.concurrency < 1:
        sys.stderr.write("toolsafe chaos: --concurrency must be at least 1\n")
        return 2
    if config.size.partitions < 0:
        sys.stderr.write("toolsafe chaos: --partitions must not be negative\n")
        return 2
    if config.size.failovers < 0:
        sys.stderr.write("toolsafe chaos: --failovers must not be negative\n")
        return 2
    if config.size.failovers and (config.database is not None or config.size.db_restarts):
        sys.stderr.write(
            "toolsafe chaos: --failovers runs a PostgreSQL primary and standby of the run's "
            "own; leave out --database and --db-restarts\n"
        )
        return 2
    if config.size.redis_restarts < 0:
        sys.stderr.write("toolsafe chaos: --redis-restarts must not be negative\n")
        return 2
    if config.size.redis_restarts and config.broker is not None:
        sys.stderr.write(
            "toolsafe chaos: --redis-restarts restarts a Redis server of the run's own; "
            "leave out --broker\n"
        )
        return 2
    from toolsafe.harness import HarnessError

    try:
        report = run(config)
    except HarnessError as error:  # a bad --broker, or a process that did not start
        sys.stderr.write(f"toolsafe chaos: {error}\n")
        return 2
    sys.stdout.write(f"command: {command_line(args)}\n")
    sys.stdout.write(report.text() + "\n")
    if args.report:
        Path(args.report).write_text(json.dumps(report.json(), indent=2) + "\n", "utf-8")
    return 0 if report.ok else EXIT_VIOLATIONS


def command_line(args: argparse.Namespace) -> str:
    """The run's options as one command (the broker and database as given)."""
    words = ["toolsafe", "chaos"]
    for name in (
        "broker", "database", "steps", "workers", "pool", "concurrency", "kills",
        "broker_flushes", "db_kill_rounds", "db_restarts", "redis_restarts", "partitions",
        "failovers", "pg_restart_command",
        "duplicates", "batch",
        "batch_interval", "max_in_progress", "seed", "bound",
    ):  # fmt: skip
        value = getattr(args, name)
        if value is not None:
            words += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "deduplicating_downstream", False):
        words.append("--deduplicating-downstream")
    if getattr(args, "hint_relay", False):
        words.append("--hint-relay")
    return shlex.join(words)


def add_parser(commands: Any) -> None:
    """Add ``stats`` and ``chaos`` to the CLI's subparsers."""
    st = commands.add_parser("stats", help="the article's counts over the step store")
    st.add_argument("--database", help="database URL (default: TOOLSAFE_DATABASE_URL)")
    st.add_argument("--prefix", help="only operation_refs starting with this")
    form = st.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON")
    form.add_argument(
        "--prometheus", action="store_true", help="print what `toolsafe metrics` serves"
    )
    st.set_defaults(handler=stats)

    ch = commands.add_parser(
        "chaos",
        help="prove it under faults: real workers, SIGKILLs, broker flushes, DB kills",
        description="Runs real celery workers, beat and the example downstream (naive unless "
        "--deduplicating-downstream); "
        "exits 1 when the invariant is violated or a worker exited without being killed. "
        "Without --broker and --database it takes a Redis db and a PostgreSQL database "
        "of its own on the local servers.",
    )
    ch.add_argument(
        "--broker",
        help="a dedicated Redis db, not 0 (its keys are deleted); default: a free db on "
        "--local-redis, or the run's own server with --redis-restarts",
    )
    ch.add_argument(
        "--database",
        help="a PostgreSQL database URL; default: a new database on --pg-admin's server, "
        "dropped afterwards",
    )
    ch.add_argument("--local-redis", default=LOCAL_REDIS, help="Redis server for a db of its own")
    ch.add_argument(
        "--pg-admin", default=LOCAL_PG_ADMIN, help="PostgreSQL URL that may CREATE DATABASE"
    )
    ch.add_argument("--steps", type=int, default=300, help="steps submitted in all")
    ch.add_argument("--workers", type=int, default=3, help="worker processes run")
    ch.add_argument(
        "--pool",
        choices=("solo", "prefork"),
        default="solo",
        help="solo: a SIGKILL at a fault point kills the whole worker; prefork: a pool "
        "process of a worker that stays up",
    )
    ch.add_argument(
        "--concurrency", type=int, default=2, help="pool processes per worker (prefork)"
    )
    ch.add_argument("--kills", type=int, default=30, help="SIGKILLs at fault points")
    ch.add_argument("--broker-flushes", type=int, default=1, help="broker flushes (queues lost)")
    ch.add_argument(
        "--db-kill-rounds", type=int, default=1, help="rounds of killed database connections"
    )
    ch.add_argument(
        "--db-restarts", type=int, default=0, help="PostgreSQL server restarts (shared server!)"
    )
    ch.add_argument(
        "--redis-restarts",
        type=int,
        default=0,
        help="kill -9 and start again the run's own Redis server (queues, unacked and ETA "
        "messages lost)",
    )
    ch.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="cut one worker off from PostgreSQL and Redis (a black-holing proxy) while it "
        "holds a lease, for longer than the lease, then heal",
    )
    ch.add_argument(
        "--failovers",
        type=int,
        default=0,
        help="run the database as a PostgreSQL primary and synchronous standby of the run's "
        "own (a multi-host URL) and fail over this many times: primary killed, standby "
        "promoted, a new standby cloned",
    )
    ch.add_argument(
        "--pg-restart-command",
        help="restarts the server, e.g. 'pg_ctlcluster --skip-systemctl-redirect 15 main restart'",
    )
    ch.add_argument(
        "--deduplicating-downstream",
        action="store_true",
        help="run the example downstream enforcing Idempotency-Key (not --naive) and have "
        "the adapters declare deduplicates_by_key: a killed call is retried one consistency "
        "window after its send; the report counts the requests the key deduplicated",
    )
    ch.add_argument(
        "--hint-relay",
        action="store_true",
        help="submit with TOOLSAFE_SUBMIT_HINTS=relay: the submits are their commits, the "
        "workers' hint relays publish the hints (under the same faults)",
    )
    ch.add_argument("--duplicates", type=int, default=60, help="duplicate messages published")
    ch.add_argument("--batch", type=int, default=20, help="steps submitted at once")
    ch.add_argument("--batch-interval", type=float, default=0.25, help="seconds between batches")
    ch.add_argument(
        "--max-in-progress", type=int, default=150, help="hold submissions above this backlog"
    )
    ch.add_argument("--seed", type=int, default=6, help="seed of the fault plan")
    ch.add_argument("--bound", type=float, default=150.0, help="seconds allowed to settle")
    ch.add_argument("--workdir", help="where logs, the fault plan and report.json go")
    ch.add_argument("--report", help="also write the JSON report here")
    ch.add_argument("--keep-key", action="append", help="a broker key a flush keeps")
    ch.set_defaults(handler=chaos)
