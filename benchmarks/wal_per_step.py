"""The WAL a step writes on PostgreSQL, exactly, whatever else the server is doing.

``python -m benchmarks.wal_per_step --steps 300`` runs, in one process and without a
worker, the store's statements of successful steps (the client's ``submit``, the
worker's claim and record) and the hand-rolled task's INSERT and UPDATE, then reads the
WAL records of that stretch with ``pg_walinspect`` and keeps only those of the run's own
database and transactions: bytes per step (with and without full-page images), by table
and index, and how many of each table's updates were HOT. ``throughput``'s WAL figure
is the server's whole WAL position, which other databases' work on a shared server
inflates; this one is not.
"""

from __future__ import annotations

import argparse
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from benchmarks import baseline
from benchmarks.common import (
    BenchDatabase,
    add_service_options,
    header,
    load_average,
    run_main,
)
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits
from toolsafe.recovery.store.sql import StepStore
from toolsafe.testing.envelopes import success

TRAITS = ToolTraits(writes=True, has_lookup=True, consistency_window=timedelta(seconds=10))
POLICY = Policy(retry=RetryPolicy(max_attempts=3))
LEASE = timedelta(seconds=30)
_REL = re.compile(r"rel \d+/(\d+)/(\d+)")


class Stretch:
    """The WAL between two positions, as pg_walinspect reads it: the records that touch
    the run's database, and those of the same transactions (their commits)."""

    def __init__(self, conn: psycopg.Connection[Any], start: str, end: str, db_oid: int) -> None:
        rows = conn.execute(
            "SELECT xid, record_length, fpi_length, block_ref "
            "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)",
            (start, end),
        ).fetchall()
        ours: list[tuple[int, int, int, str]] = []
        xids: set[int] = set()
        for xid, length, fpi, refs in rows:
            nodes = [(int(db), int(node)) for db, node in _REL.findall(refs or "")]
            if any(db == db_oid for db, _node in nodes):
                ours.append((int(xid), int(length), int(fpi), refs or ""))
                if int(xid):
                    xids.add(int(xid))
        for xid, length, fpi, refs in rows:
            if int(xid) in xids and not _REL.search(refs or ""):
                ours.append((int(xid), int(length), int(fpi), refs or ""))
        self.records = ours

    def total(self) -> tuple[int, int]:
        """All bytes, and the full-page images' part of them."""
        return sum(r[1] for r in self.records), sum(r[2] for r in self.records)

    def by_relation(self, names: dict[int, str]) -> Counter[str]:
        """Bytes by the first relation a record touches (a commit: ``commit``)."""
        found: Counter[str] = Counter()
        for _xid, length, _fpi, refs in self.records:
            match = _REL.search(refs)
            key = "commit / other" if match is None else names.get(int(match.group(2)), "?")
            found[key] += length
        return found


def _position(conn: psycopg.Connection[Any]) -> str:
    # The flushed position: pg_walinspect reads no further, and a synchronous commit
    # returns only once its record is flushed.
    return str(conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0])  # type: ignore[index]


def _updates(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s", (table,)
    ).fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _measure(
    conn: psycopg.Connection[Any], db_oid: int, body: Callable[[], None]
) -> tuple[Stretch, float]:
    start = _position(conn)
    started = time.perf_counter()
    body()
    seconds = time.perf_counter() - started
    return Stretch(conn, start, _position(conn), db_oid), seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wal_per_step", description=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="steps of each kind")
    # The options every program takes (``make bench BENCH_ARGS=…``); no broker is used.
    add_service_options(parser)
    args = parser.parse_args(argv)
    header(f"wal_per_step: {args.steps} steps each, PostgreSQL, pg_walinspect")
    run = uuid.uuid4().hex[:8]
    with BenchDatabase(args.database, drop_existing=args.drop_existing) as database:
        database.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        database.execute(baseline.CALLS_TABLE_DDL)
        engine = make_engine(database.url)
        store = StepStore(engine)
        refs = [f"wal-{run}-{i}" for i in range(args.steps)]
        with database.connect() as conn:
            found = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            ).fetchone()
            db_oid = int(str(found[0])) if found is not None else 0

            def hand_rolled() -> None:
                for ref in refs:
                    row = conn.execute(
                        "INSERT INTO bench_calls (operation_ref, state, created_at, updated_at) "
                        "VALUES (%s, 'started', clock_timestamp(), clock_timestamp()) "
                        "RETURNING id",
                        (ref,),
                    ).fetchone()
                    conn.execute(
                        "UPDATE bench_calls SET state = 'done', updated_at = clock_timestamp() "
                        "WHERE id = %s",
                        (row[0],),  # type: ignore[index]
                    )

            def submit() -> None:
                for ref in refs:
                    store.submit(
                        "bench_write", {"ref": ref}, operation_ref=ref, policy=POLICY, now=_now()
                    )

            def drain() -> None:
                rng = random.Random(1)
                for ref in refs:
                    claim = store.claim_execution(ref, "bench:1:w", LEASE, _now())
                    if claim is None:
                        raise RuntimeError(f"{ref} was not claimed")
                    envelope = success(ref, f"ev-{ref}", checked_at=_now())
                    recorded = store.record(
                        claim, Executed(envelope), traits=TRAITS, policy=POLICY, now=_now(), rng=rng
                    )
                    if recorded is None:
                        raise RuntimeError(f"{ref} was not recorded")

            # Warm the statements and the tables first (an empty table's first pages).
            conn.execute("CHECKPOINT")
            phases = {
                "hand-rolled INSERT + UPDATE": _measure(conn, db_oid, hand_rolled),
                "toolsafe submit": _measure(conn, db_oid, submit),
                "toolsafe claim + record (the drain)": _measure(conn, db_oid, drain),
            }
            engine.dispose()  # a backend that exits reports its statistics
            time.sleep(1.0)
            updates = {table: _updates(conn, table) for table in ("bench_calls", "steps")}
            names = {
                int(str(node)): str(name)
                for node, name in conn.execute(
                    "SELECT pg_relation_filenode(oid), relname FROM pg_class "
                    "WHERE pg_relation_filenode(oid) IS NOT NULL"
                ).fetchall()
            }
    print(f"# load average at the end {load_average()}\n")
    print(f"{'phase':38} {'WAL B/step':>10} {'of it FPI':>9} {'no FPI':>7} {'ms/step':>8}")
    per_step: dict[str, float] = {}
    for label, (stretch, seconds) in phases.items():
        total, fpi = stretch.total()
        per_step[label] = (total - fpi) / args.steps
        print(
            f"{label:38} {total / args.steps:10.0f} {fpi / args.steps:9.0f} "
            f"{(total - fpi) / args.steps:7.0f} {1000 * seconds / args.steps:8.2f}"
        )
    hand = per_step["hand-rolled INSERT + UPDATE"]
    drained = per_step["toolsafe claim + record (the drain)"]
    both = drained + per_step["toolsafe submit"]
    verdict = "met" if drained <= 2 * hand else "NOT met"
    print(f"\nwithout full-page images: the drain {drained / hand:.2f}x the hand-rolled task's")
    print(f"(target <= 2x) {verdict}; submit and drain together {both / hand:.2f}x")
    for label, (stretch, _seconds) in phases.items():
        print(f"\n{label}: bytes per step by relation (full-page images included)")
        for name, size in stretch.by_relation(names).most_common():
            print(f"  {name:40} {size / args.steps:8.0f}")
    print("\nupdates (all, HOT) per table:")
    for table, (all_updates, hot) in updates.items():
        print(f"  {table:20} {all_updates:6d} {hot:6d}")
    return 0


def _now() -> datetime:
    return datetime.now(UTC)


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
