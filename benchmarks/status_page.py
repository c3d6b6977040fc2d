"""The status page's queries as the steps table grows: the overview (capped counts and
each group's newest steps), a group's deep keyset page, and the tool and ref-prefix
filters, at 10k, 100k and 1M rows, with and without migration 0004's indexes.

``python -m benchmarks.status_page`` bulk-loads the table with ``generate_series`` (most
steps terminal, 0.1% in each waiting state, one tool in 10,007 rare, one ref prefix in
100,003 rare), times each page's queries as ``/ui/`` runs them (``Overview``), and
prints the plans. The baseline is the page without the status-page indexes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

from benchmarks.common import BenchDatabase, BenchError, add_service_options, header, run_main
from toolsafe.gateway.ui.present import GROUPS
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.overview import StepFilter
from toolsafe.recovery.store.sql.overview import Overview

INDEXES: Final = ("ix_steps_state_id", "ix_steps_tool_state_id", "ix_steps_state_operation_ref")
PER_GROUP: Final = 10
PAGE: Final = 50

# Per 1000 steps: one in each of the six live states, 10 failed, 10 escalated, 5
# cancelled, the rest succeeded. Tools: send_email one in 7, rare_tool one in 10,007,
# create_invoice the rest. Refs: tenant_<0-9>/run_<g>/step_1, audit/<g> one in 100,003.
LOAD_SQL: Final = """
INSERT INTO steps (operation_ref, tool, input, input_hash, state, commit_state, attempts,
    max_attempts, verification_attempts, lookups_unavailable, due_at, fingerprint_repeats,
    flagged_fields, version, created_at, updated_at)
SELECT CASE WHEN mod(g, 100003) = 0 THEN 'audit/' || g
            ELSE 'tenant_' || mod(g, 10) || '/run_' || g || '/step_1' END,
    CASE WHEN mod(g, 10007) = 0 THEN 'rare_tool' WHEN mod(g, 7) = 0 THEN 'send_email'
         ELSE 'create_invoice' END,
    jsonb_build_object('n', g), md5(g::text),
    CASE WHEN mod(g, 1000) = 0 THEN 'needs_input' WHEN mod(g, 1000) = 1 THEN 'waiting_retry'
         WHEN mod(g, 1000) = 2 THEN 'verifying' WHEN mod(g, 1000) = 3 THEN 'awaiting_approval'
         WHEN mod(g, 1000) = 4 THEN 'pending' WHEN mod(g, 1000) = 5 THEN 'in_flight'
         WHEN mod(g, 1000) < 16 THEN 'failed' WHEN mod(g, 1000) < 26 THEN 'escalated'
         WHEN mod(g, 1000) < 31 THEN 'cancelled' ELSE 'succeeded' END,
    NULL, 1, 5, 0, 0, now() + interval '1 minute', 0, '[]'::jsonb, 3,
    now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(%s::bigint, %s::bigint) AS g
"""


def overview_page(overview: Overview, where: StepFilter) -> int:
    """What ``GET /ui/`` reads: the capped counts, then each group's newest steps."""
    counts = overview.counts(where)
    shown = 0
    for group in GROUPS:
        if sum(counts[state].value for state in group.states):
            found, _ = overview.page(
                StepFilter(where.tool, where.prefix, frozenset(group.states)),
                limit=PER_GROUP,
                sizes=counts,
            )
            shown += len(found)
    return shown


def _median_ms(function: Callable[[], object], rounds: int) -> float:
    function()  # warm: connections, caches
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _plans(database: BenchDatabase, cursor: int) -> list[str]:
    """The scan of each page's main query, as PostgreSQL plans it."""
    deep = f"SELECT * FROM steps WHERE state = 'succeeded' AND id < {int(cursor)}"  # noqa: S608
    queries = {
        "count waiting for approval": "SELECT count(*) FROM (SELECT id FROM steps WHERE "
        "state = 'awaiting_approval' LIMIT 10001) AS c",
        "group page (approval)": "SELECT * FROM steps WHERE state = 'awaiting_approval' "
        "ORDER BY id DESC LIMIT 51",
        "running page (in_flight)": "SELECT * FROM steps WHERE state = 'in_flight' "
        "ORDER BY id DESC LIMIT 51",
        "deep page (succeeded)": deep + " ORDER BY id DESC LIMIT 51",
        "rare tool, escalated": "SELECT * FROM steps WHERE tool = 'rare_tool' AND "
        "state = 'escalated' ORDER BY id DESC LIMIT 51",
        "rare ref prefix (failed)": "SELECT * FROM steps WHERE state = 'failed' AND "
        "operation_ref LIKE 'audit/%' ORDER BY id DESC LIMIT 51",
        "broad ref prefix count": "SELECT count(*) FROM (SELECT id FROM steps WHERE "
        "state = 'succeeded' AND operation_ref LIKE 'tenant\\_3/%' LIMIT 10001) AS c",
    }
    found = []
    with database.connect() as conn:
        for label, query in queries.items():
            rows = conn.execute(f"EXPLAIN {query}".encode()).fetchall()
            scans = [str(r[0]).strip().lstrip("-> ") for r in rows if "Scan" in str(r[0])]
            found.append(f"{label}: {scans[0] if scans else rows[0][0]}")
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.status_page", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="10000,100000,1000000", help="rows, ascending")
    parser.add_argument("--rounds", type=int, default=10, help="timed reads per figure")
    add_service_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    except ValueError:
        raise BenchError("--sizes must be comma-separated row counts") from None
    if not sizes or sizes != sorted(sizes) or sizes[0] < 1 or args.rounds < 1:
        raise BenchError("--sizes must be positive and ascending, --rounds at least 1")
    header(
        f"status page: sizes {', '.join(f'{size:,}' for size in sizes)}; "
        f"median of {args.rounds} reads (ms)"
    )
    cases: dict[str, Callable[[Overview, int], object]] = {
        "overview": lambda o, _c: overview_page(o, StepFilter()),
        "group page": lambda o, _c: o.page(
            StepFilter(states=frozenset({StepState.AWAITING_APPROVAL})), limit=PAGE
        ),
        "deep page": lambda o, c: o.page(
            StepFilter(states=frozenset(GROUPS[-1].states)), before=c, limit=PAGE
        ),
        "rare tool": lambda o, _c: overview_page(o, StepFilter(tool="rare_tool")),
        "tenant prefix": lambda o, _c: overview_page(o, StepFilter(prefix="tenant_3/")),
        "rare prefix": lambda o, _c: overview_page(o, StepFilter(prefix="audit/")),
    }
    print(f"{'rows':>9} {'indexes':>7} " + " ".join(f"{name:>13}" for name in cases))
    with BenchDatabase(args.database, drop_existing=args.drop_existing) as database:
        engine = make_engine(database.url)
        overview = Overview(engine)
        with database.connect() as conn:
            definitions = {
                str(name): str(sql)
                for name, sql in conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'steps'"
                ).fetchall()
                if name in INDEXES
            }
        if set(definitions) != set(INDEXES):
            raise BenchError(f"the migrated schema lacks the status page's indexes {INDEXES}")
        loaded = 0
        plans: list[tuple[int, list[str]]] = []
        for size in sizes:
            with database.connect() as conn:
                conn.execute(LOAD_SQL.encode(), (loaded + 1, size))
                conn.execute(b"VACUUM ANALYZE steps")
            loaded = size
            cursor = size // 2
            for indexed in (True, False):
                if not indexed:
                    database.execute("; ".join(f"DROP INDEX {name}" for name in INDEXES))
                    database.execute("ANALYZE steps")
                try:
                    figures = [
                        _median_ms(partial(case, overview, cursor), args.rounds)
                        for case in cases.values()
                    ]
                    if indexed:
                        plans.append((size, _plans(database, cursor)))
                finally:
                    if not indexed:
                        database.execute("; ".join(definitions.values()))
                        database.execute("ANALYZE steps")
                print(
                    f"{size:>9,} {'yes' if indexed else 'no':>7} "
                    + " ".join(f"{ms:13.2f}" for ms in figures),
                    flush=True,
                )
        engine.dispose()
    print("\nplans with the indexes:")
    for size, lines in plans:
        print(f"  {size:,} rows")
        for line in lines:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
