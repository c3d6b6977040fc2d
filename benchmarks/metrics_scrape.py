"""The cost of a /metrics scrape as the store grows: 10k, 100k and 1M steps.

``python -m benchmarks.metrics_scrape`` bulk-loads steps and their events with
``generate_series`` (most succeeded, some through verification, some escalated, failed or
still waiting, a few refused duplicates), then at each size: the exporter's catch-up (the
whole log read once, at start), one poll after 1,000 new events, and the scrape itself
over HTTP (median of ``--rounds``, queue depth from the Redis broker included). The
baseline is the whole-table computation every worker ran on each scrape before (issue
13), timed in the same run. Target: a scrape under 50 ms with 10^6 steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Final

import httpx

from benchmarks.common import (
    BenchDatabase,
    BenchError,
    BrokerDb,
    add_service_options,
    header,
    load_average,
    run_main,
)
from toolsafe.celeryconfig import QUEUES
from toolsafe.metrics.exporter import Exporter, Served, read_counts
from toolsafe.metrics.queues import QueueDepth
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.tally import SqlTally

TARGET_MS: Final = 50.0
TARGET_STEPS: Final = 1_000_000

# Per step g: a tool of three, and a fate by g mod 100: 0-84 succeeded at once, 85-89
# succeeded after an unknown outcome and a lookup, 90-92 escalated, 93-94 failed, 95-96
# waiting_retry, 97 verifying, 98 pending, 99 needs_input.
STEPS_SQL: Final = """
INSERT INTO steps (operation_ref, tool, input, input_hash, state, commit_state, attempts,
    max_attempts, verification_attempts, lookups_unavailable, fingerprint_repeats,
    flagged_fields, reason, version, created_at, updated_at)
SELECT 'load/' || g, (ARRAY['create_invoice','send_email','deploy'])[1 + mod(g, 3)],
    jsonb_build_object('n', g), md5(g::text),
    CASE WHEN mod(g, 100) < 90 THEN 'succeeded' WHEN mod(g, 100) < 93 THEN 'escalated'
        WHEN mod(g, 100) < 95 THEN 'failed' WHEN mod(g, 100) < 97 THEN 'waiting_retry'
        WHEN mod(g, 100) = 97 THEN 'verifying' WHEN mod(g, 100) = 98 THEN 'pending'
        ELSE 'needs_input' END,
    CASE WHEN mod(g, 100) < 90 THEN 'committed' WHEN mod(g, 100) IN (90, 97) THEN 'unknown'
        WHEN mod(g, 100) = 98 THEN NULL ELSE 'not_committed' END,
    CASE WHEN mod(g, 100) = 98 THEN 0 ELSE 1 END, 5, 0, 0, 0, '[]'::jsonb,
    CASE WHEN mod(g, 100) BETWEEN 90 AND 92 THEN 'attempts_exhausted' END,
    3, now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(%s::bigint, %s::bigint) AS g
"""

# Every step's events, as the runtime writes them: (kind, from, to, seconds after submit,
# reason, commit_state) by fate.
EVENTS_SQL: Final = """
INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label, detail)
SELECT s.id, s.operation_ref, s.created_at + make_interval(secs => e.after), e.kind,
    e.src, e.dst, e.kind,
    jsonb_strip_nulls(jsonb_build_object('reason', e.reason, 'claim', e.claim,
        'envelope', CASE WHEN e.commit_state IS NULL THEN NULL
            ELSE jsonb_build_object('commit_state', e.commit_state) END))
FROM steps s
CROSS JOIN LATERAL (
    SELECT * FROM (VALUES
        (0, 'submitted', NULL, 'pending', 0.0, NULL, NULL, NULL),
        (1, 'claimed', 'pending', 'in_flight', 0.2, NULL, NULL, NULL),
        (2, 'executed', 'in_flight', 'succeeded', 0.4, NULL, NULL, 'committed'),
        (3, 'executed', 'in_flight', 'verifying', 0.4, NULL, NULL, 'unknown'),
        (4, 'noop', 'verifying', 'verifying', 0.6, 'unknown_outcome', 'execute', NULL),
        (5, 'looked_up', 'verifying', 'succeeded', 3.4, NULL, NULL, NULL),
        (6, 'executed', 'in_flight', 'escalated', 0.5, 'attempts_exhausted', NULL,
            'not_committed'),
        (7, 'executed', 'in_flight', 'failed', 0.5, NULL, NULL, 'not_committed'),
        (8, 'executed', 'in_flight', 'waiting_retry', 0.5, NULL, NULL, 'not_committed'),
        (9, 'executed', 'in_flight', 'needs_input', 0.5, 'invalid_input', NULL,
            'not_committed')
    ) AS v(n, kind, src, dst, after, reason, claim, commit_state)
    WHERE v.n IN (0)
       OR (s.state <> 'pending' AND v.n = 1)
       OR (s.state = 'succeeded' AND mod(s.id, 100) < 85 AND v.n = 2)
       OR (s.state = 'succeeded' AND mod(s.id, 100) >= 85 AND v.n IN (3, 4, 5))
       OR (s.state = 'verifying' AND v.n IN (3, 4))
       OR (s.state = 'escalated' AND v.n = 6)
       OR (s.state = 'failed' AND v.n = 7)
       OR (s.state = 'waiting_retry' AND v.n = 8)
       OR (s.state = 'needs_input' AND v.n = 9)
    ORDER BY v.n
) AS e
WHERE s.id BETWEEN %s AND %s
ORDER BY s.id, e.n
"""

NEW_EVENTS: Final = 1000
# 1,000 new events after the catch-up: noops (redeliveries with nothing to do).
NEW_EVENTS_SQL: Final = """
INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label, detail)
SELECT s.id, s.operation_ref, now(), 'noop', s.state, s.state, 'execute claim refused',
    '{"claim": "execute", "reason": "terminal"}'::jsonb
FROM generate_series(1, %s) AS g JOIN steps s ON s.id = 1 + mod(g, %s)
"""


def _scrape_ms(url: str, rounds: int) -> tuple[float, int]:
    with httpx.Client(timeout=30) as http:
        http.get(url).raise_for_status()  # warm: the connection
        times = []
        size = 0
        for _ in range(rounds):
            started = time.perf_counter()
            reply = http.get(url)
            times.append((time.perf_counter() - started) * 1000)
            reply.raise_for_status()
            size = len(reply.content)
    return statistics.median(times), size


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.metrics_scrape", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="10000,100000,1000000", help="steps, ascending")
    parser.add_argument("--rounds", type=int, default=50, help="timed scrapes per figure")
    parser.add_argument(
        "--baseline-up-to",
        type=int,
        default=1_000_000,
        help="time the old whole-table computation up to this many steps",
    )
    add_service_options(parser)
    return parser


Row = tuple[int, float, int, float, float, float, int, float | None]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    except ValueError:
        raise BenchError("--sizes must be comma-separated step counts") from None
    if not sizes or sizes != sorted(sizes) or sizes[0] < 1:
        raise BenchError("--sizes must be positive and ascending")
    if args.rounds < 1:
        raise BenchError("--rounds must be at least 1")
    header(
        f"metrics scrape: sizes {', '.join(f'{size:,}' for size in sizes)}; median of "
        f"{args.rounds} scrapes; baseline up to {args.baseline_up_to:,} steps"
    )
    rows: list[Row] = []
    with (
        BrokerDb(args.broker, held_by_caller=args.broker_held_by_caller) as broker,
        BenchDatabase(args.database, drop_existing=args.drop_existing) as database,
    ):
        engine = make_engine(database.url)
        store = StepStore(engine)
        loaded = 0
        for size in sizes:
            started = time.perf_counter()
            with database.connect() as conn:
                conn.execute(STEPS_SQL.encode(), (loaded + 1, size))
                conn.execute(EVENTS_SQL.encode(), (loaded + 1, size))
                conn.execute(b"VACUUM ANALYZE steps")
                conn.execute(b"VACUUM ANALYZE step_events")
                events = conn.execute(b"SELECT count(*) FROM step_events").fetchone()
            load_s = time.perf_counter() - started
            loaded = size
            exporter = Exporter(
                SqlTally(store), queues=QueueDepth(broker.url, QUEUES), gap_timeout=60
            )
            started = time.perf_counter()
            exporter.poll()
            catch_up = time.perf_counter() - started
            folded = exporter.follower.tally.events
            with database.connect() as conn:
                conn.execute(NEW_EVENTS_SQL.encode(), (NEW_EVENTS, size))
            started = time.perf_counter()
            new = exporter.poll()
            poll_ms = (time.perf_counter() - started) * 1000
            if new != NEW_EVENTS:
                raise BenchError(f"the poll after 1,000 new events folded {new}")
            served = Served(exporter, "127.0.0.1", 0)
            try:
                scrape, body = _scrape_ms(f"http://127.0.0.1:{served.port}/metrics", args.rounds)
            finally:
                served.close()
            old: float | None = None
            if size <= args.baseline_up_to:
                started = time.perf_counter()
                read_counts(store)
                old = (time.perf_counter() - started) * 1000
            rows.append((size, load_s, folded, catch_up, poll_ms, scrape, body, old))
            shown = "-" if old is None else f"{old:,.0f} ms"
            print(
                f"{size:>9,} steps, {int(str(events[0])) if events else 0:,} events (loaded in "
                f"{load_s:5.1f}s): catch-up {catch_up:6.1f}s, poll of 1,000 new "
                f"{poll_ms:6.1f} ms, scrape {scrape:6.2f} ms ({body:,} bytes), old "
                f"whole-table {shown}  load {load_average()}",
                flush=True,
            )
        engine.dispose()
    report(rows)
    return 0


def report(rows: list[Row]) -> None:
    print(
        f"\n{'steps':>9} {'scrape ms':>9} {'x first':>7} {'old ms':>9} {'old/new':>8} "
        f"{'catch-up s':>10} {'poll ms':>8}"
    )
    first = rows[0][5]
    for size, _load, _folded, catch_up, poll_ms, scrape, _body, old in rows:
        ratio = "-" if old is None else f"{old / scrape:8.0f}"
        old_ms = "-" if old is None else f"{old:9.0f}"
        print(
            f"{size:>9,} {scrape:9.2f} {scrape / first:7.2f} {old_ms:>9} {ratio:>8} "
            f"{catch_up:10.1f} {poll_ms:8.1f}"
        )
    at_target = [row for row in rows if row[0] >= TARGET_STEPS]
    if at_target:
        scrape = at_target[0][5]
        verdict = "met" if scrape < TARGET_MS else "NOT met"
        print(
            f"\ntarget: a scrape under {TARGET_MS:.0f} ms with {TARGET_STEPS:,} steps: "
            f"{verdict} ({scrape:.2f} ms)"
        )
    else:
        print(f"\ntarget: not measured (no size reached {TARGET_STEPS:,} steps)")
    print(f"load average at the end: {load_average()}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, None))
