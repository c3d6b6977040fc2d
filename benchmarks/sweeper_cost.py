"""Sweeper cost as the steps table grows: one sweep (``expire_leases``, ``due_work`` and
``release_parked``) with 10k, 100k and 1M rows, most of them terminal, a fixed few due.

``python -m benchmarks.sweeper_cost`` bulk-loads the table with ``generate_series``,
times an idle sweep (nothing to do, the steady state) and a busy one (due steps and
expired leases to handle), then the idle sweep again without the partial indexes. The
plain-Celery baseline is kombu's own sweep for lost messages (``restore_visible``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from benchmarks.common import (
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
)
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.schema import WORK_STATE_PREDICATE
from toolsafe.recovery.store.sql import StepStore
from toolsafe.settings import PolicySettings

PARTIAL_INDEXES: Final = ("ix_steps_due_work", "ix_steps_leases", "ix_steps_parked")
TARGET_MS: Final = 20.0  # issue 14: the sweeper's due-work query < 20 ms at 10^6 rows
MAX_ETA: Final = timedelta(seconds=10)  # the release horizon (TOOLSAFE_MAX_ETA's default)
SWEEP_BATCH: Final = 500
REPUBLISH_AFTER: Final = timedelta(seconds=30)

# 97% succeeded, 1% failed, 1% escalated, 1% waiting_retry due tomorrow (in the partial
# index, not due): what a table looks like after months of traffic.
LOAD_SQL: Final = """
INSERT INTO steps (operation_ref, tool, input, input_hash, state, commit_state, attempts,
    max_attempts, verification_attempts, lookups_unavailable, due_at, lease_owner,
    lease_expires_at, last_sent_at, last_envelope, fingerprint, fingerprint_repeats,
    flagged_fields, approval_input_hash, reason, published_at, version, created_at,
    updated_at)
SELECT 'load/' || g, 'bench_write', jsonb_build_object('n', g), md5(g::text),
    CASE mod(g, 100) WHEN 0 THEN 'waiting_retry' WHEN 1 THEN 'failed' WHEN 2 THEN 'escalated'
        ELSE 'succeeded' END,
    CASE mod(g, 100) WHEN 0 THEN 'not_committed' WHEN 1 THEN 'not_committed'
        WHEN 2 THEN 'unknown' ELSE 'committed' END,
    1, 5, 0, 0,
    CASE mod(g, 100) WHEN 0 THEN now() + interval '1 day' ELSE NULL END,
    NULL, NULL, now() - interval '1 hour', NULL, NULL, 0, '[]'::jsonb, NULL, NULL,
    now() - interval '1 hour', 3, now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(%s::bigint, %s::bigint) AS g
"""

LIVE_SQL: Final = """
INSERT INTO steps (operation_ref, tool, input, input_hash, state, commit_state, attempts,
    max_attempts, verification_attempts, lookups_unavailable, due_at, lease_owner,
    lease_expires_at, fingerprint_repeats, flagged_fields, version, created_at, updated_at)
SELECT 'live/' || kind || '/' || g, 'bench_write', jsonb_build_object('n', g), md5(g::text),
    CASE kind WHEN 'due' THEN 'pending' ELSE 'in_flight' END, NULL,
    CASE kind WHEN 'due' THEN 0 ELSE 1 END, 5, 0, 0,
    now() - interval '1 minute',
    CASE kind WHEN 'due' THEN NULL ELSE 'gone-worker:1' END,
    CASE kind WHEN 'due' THEN NULL ELSE now() - interval '1 minute' END,
    0, '[]'::jsonb, 2, now() - interval '2 minutes', now() - interval '2 minutes'
FROM (SELECT 'due' AS kind, g FROM generate_series(1, %s) AS g
      UNION ALL SELECT 'lease', g FROM generate_series(1, %s) AS g) AS live
"""
CLEAR_LIVE_SQL: Final = (
    "DELETE FROM step_events WHERE step_id IN "
    "(SELECT id FROM steps WHERE operation_ref LIKE 'live/%');"
    "DELETE FROM steps WHERE operation_ref LIKE 'live/%'"
)


def _median_ms(function: Callable[[], object], rounds: int, before: Callable[[], None]) -> float:
    before()
    function()  # warm: connections, statement caches
    times = []
    for _ in range(rounds):
        before()
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


class Sweeper:
    """One sweep as ``toolsafe.tasks.sweeper.sweep`` runs it, without publishing."""

    def __init__(self, store: StepStore) -> None:
        self.store = store
        traits = ToolTraits(writes=True, has_lookup=True)
        policy: Policy = PolicySettings().policy()
        self.traits_for: Callable[[str], ToolTraits] = lambda _tool: traits
        self.policy_for: Callable[[str], Policy] = lambda _tool: policy
        self.handled = 0

    def __call__(self) -> None:
        now = datetime.now(UTC)
        expired = self.store.expire_leases(now, self.traits_for, self.policy_for, limit=SWEEP_BATCH)
        due = self.store.due_work(now, limit=SWEEP_BATCH, republish_after=REPUBLISH_AFTER)
        # Here the expired leases' lookups, whose hints the real sweep publishes first.
        self.store.release_parked(now, now + MAX_ETA, limit=SWEEP_BATCH)
        self.handled = len(expired) + len(due)


def _plan_line(database: BenchDatabase) -> str:
    query = (
        f"EXPLAIN SELECT id FROM steps WHERE {WORK_STATE_PREDICATE} AND due_at <= now() "  # noqa: S608 - constant
        f"ORDER BY due_at LIMIT {SWEEP_BATCH}"
    )
    with database.connect() as conn:
        lines = [str(row[0]) for row in conn.execute(query.encode()).fetchall()]
    scans = [line.strip().lstrip("-> ") for line in lines if "Scan" in line]
    return scans[0] if scans else lines[0]


def _kombu_sweep_ms(broker_url: str, rounds: int) -> float:
    from kombu.connection import Connection

    options = {"visibility_timeout": 3600}
    with Connection(broker_url, transport_options=options) as conn:  # type: ignore[no-untyped-call]
        qos: Any = conn.default_channel.qos
        return _median_ms(lambda: qos.restore_visible(num=10, interval=1), rounds, lambda: None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweeper_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="10000,100000,1000000", help="rows, ascending")
    parser.add_argument("--due", type=int, default=100, help="due steps in a busy sweep")
    parser.add_argument("--expired", type=int, default=10, help="expired leases, busy sweep")
    parser.add_argument("--rounds", type=int, default=20, help="timed sweeps per figure")
    parser.add_argument("--no-baseline", action="store_true", help="skip kombu's sweep")
    add_service_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    except ValueError:
        raise BenchError("--sizes must be comma-separated row counts") from None
    if not sizes or sizes != sorted(sizes) or sizes[0] < 1:
        raise BenchError("--sizes must be positive and ascending")
    if args.rounds < 1 or args.due < 0 or args.expired < 0:
        raise BenchError("--rounds at least 1, --due and --expired not negative")
    header(
        f"sweeper cost: sizes {', '.join(f'{size:,}' for size in sizes)}; busy sweep "
        f"{args.due} due + {args.expired} expired leases; median of {args.rounds} sweeps"
    )
    kombu_ms: float | None = None
    if not args.no_baseline:
        with BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker:
            kombu_ms = _kombu_sweep_ms(broker.url, args.rounds)
    rows: list[tuple[int, float, float, float, float, str, str]] = []
    with BenchDatabase(args.database, drop_existing=args.drop_existing) as database:
        engine = make_engine(database.url)
        sweep = Sweeper(StepStore(engine))
        definitions: dict[str, str] = {}
        with database.connect() as conn:
            for name, definition in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'steps'"
            ).fetchall():
                if name in PARTIAL_INDEXES:
                    definitions[str(name)] = str(definition)
        if set(definitions) != set(PARTIAL_INDEXES):
            raise BenchError(f"the migrated schema lacks the partial indexes {PARTIAL_INDEXES}")

        def clear_live() -> None:
            database.execute(CLEAR_LIVE_SQL)

        def reset_live() -> None:
            clear_live()
            with database.connect() as conn:
                conn.execute(LIVE_SQL.encode(), (args.due, args.expired))

        loaded = 0
        for size in sizes:
            started = time.perf_counter()
            with database.connect() as conn:
                conn.execute(LOAD_SQL.encode(), (loaded + 1, size))
                conn.execute(b"VACUUM ANALYZE steps")
            load_s = time.perf_counter() - started
            loaded = size
            clear_live()
            idle = _median_ms(sweep, args.rounds, lambda: None)
            plan = _plan_line(database)
            busy = _median_ms(sweep, max(3, args.rounds // 4), reset_live)
            if sweep.handled != args.due + args.expired:
                raise BenchError(f"a busy sweep handled {sweep.handled} steps")
            clear_live()
            database.execute("; ".join(f"DROP INDEX {name}" for name in PARTIAL_INDEXES))
            database.execute("ANALYZE steps")
            try:
                bare = _median_ms(sweep, max(3, args.rounds // 4), lambda: None)
                bare_plan = _plan_line(database)
            finally:
                database.execute("; ".join(definitions.values()))
                database.execute("ANALYZE steps")
            rows.append((size, load_s, idle, busy, bare, plan, bare_plan))
            print(
                f"{size:>9,} rows (loaded in {load_s:5.1f}s): idle {idle:7.2f} ms, busy "
                f"{busy:7.2f} ms, idle without partial indexes {bare:8.2f} ms  "
                f"load {load_average()}",
                flush=True,
            )
        engine.dispose()
    report(rows, kombu_ms, args)
    return 0


def report(
    rows: list[tuple[int, float, float, float, float, str, str]],
    kombu_ms: float | None,
    args: argparse.Namespace,
) -> None:
    first_idle, first_busy = rows[0][2], rows[0][3]
    print(
        f"\n{'rows':>9} {'idle ms':>8} {'x first':>7} {'busy ms':>8} {'x first':>7} "
        f"{'no-index ms':>11} {'x idle':>7}"
    )
    for size, _load, idle, busy, bare, _plan, _bare_plan in rows:
        print(
            f"{size:>9,} {idle:8.2f} {idle / first_idle:7.2f} {busy:8.2f} "
            f"{busy / first_busy:7.2f} {bare:11.2f} {bare / idle:7.1f}"
        )
    print("\ndue-work query plan (with the partial index | without):")
    for size, *_rest, plan, bare_plan in rows:
        print(f"  {size:>9,}: {plan} | {bare_plan}")
    if kombu_ms is not None:
        print(
            f"\nplain Celery baseline: kombu restore_visible (its sweep for lost messages, "
            f"nothing to restore) {kombu_ms:.2f} ms"
        )
        for size, _load, idle, busy, *_ in rows:
            print(
                f"  {size:>9,} rows: idle sweep {idle / kombu_ms:5.1f}x kombu's, busy "
                f"{busy / kombu_ms:5.1f}x"
            )
    size, _load, idle, busy, *_ = rows[-1]
    verdict = "met" if idle < TARGET_MS else "NOT met"
    print(
        f"\ntarget: the sweep's queries at {size:,} rows < {TARGET_MS:g} ms: {idle:.2f} ms "
        f"(idle: all three statements, nothing to hand out)  {verdict}; busy {busy:.2f} ms "
        f"(with {args.due} due and {args.expired} expired handled)"
    )
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
