"""Each benchmark program of DESIGN §10 still runs end to end, at a tiny size.

These are not timed tests: they prove the documented commands work against the real
Redis and PostgreSQL, print their baseline ratios, and drop the database they created.
Each program runs as ``python -m benchmarks.<name>`` from the suite's preloaded
interpreter (toolsafe/harness/preload.py), and so do the workers, beat and gateways it
starts: the same commands, without a second of imports each.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from toolsafe.harness import preload

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def run_benchmark(name: str, pg_url: str, redis_url: str, *args: str) -> str:
    """Run ``python -m benchmarks.<name>`` on a database of its own; its stdout."""
    base = pg_url.rsplit("/", 1)[0]
    database = f"toolsafe_bench_smoke_{uuid.uuid4().hex[:8]}"
    command = [
        sys.executable, "-m", f"benchmarks.{name}", *args,
        "--broker", redis_url, "--broker-held-by-caller",
        "--database", f"{base}/{database}",
    ]  # fmt: skip
    done = preload.run(
        command,
        env=dict(os.environ),
        cwd=ROOT,
        timeout=240,
        modules=("benchmarks",),
        preload_children=True,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    admin = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
        assert left.fetchone() is None, f"{name} left its database {database} behind"
    return done.stdout


def test_sweeper_cost_prints_flatness_and_the_kombu_baseline(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "sweeper_cost", pg_url, redis_url,
        "--sizes", "1000,3000", "--rounds", "3", "--due", "5", "--expired", "2",
    )  # fmt: skip
    assert "idle sweep" in out and "x kombu's" in out
    assert "Index Scan using ix_steps_due_work" in out
    assert "    3,000 " in out
    assert "target: the sweep's queries at 3,000 rows < 20 ms" in out


def test_wal_per_step_reads_its_own_records(pg_url: str, redis_url: str) -> None:
    out = run_benchmark("wal_per_step", pg_url, redis_url, "--steps", "20")
    assert "toolsafe claim + record (the drain)" in out and "the hand-rolled task's" in out
    assert "  steps " in out and "  step_events " in out
    assert "updates (all, HOT) per table:" in out


def test_profile_step_times_the_three_bodies(pg_url: str, redis_url: str) -> None:
    out = run_benchmark("profile_step", pg_url, redis_url, "--steps", "30", "--top", "3")
    assert "toolsafe execute body (claim, call, record)" in out
    assert "(COMMIT)" in out and "cProfile, by own time" in out
    assert "worker side: toolsafe" in out


def test_submit_cost_prints_both_targets(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "submit_cost", pg_url, redis_url,
        "--calls", "20", "--batch", "10", "--agents", "4", "--agent-calls", "3",
    )  # fmt: skip
    assert "submit_many (batches of 10)" in out
    assert "gateway, shared commits" in out and "in process, one commit each" in out
    assert "submit / plain send_task" in out and "submit_many from one thread" in out
    assert "submit, the relay / plain send_task" in out
    assert "gateway, shared commits, the relay" in out
    assert out.count(" met") + out.count("NOT met") >= 4


def test_lost_hints_counts_resent_against_lost_for_both_rules(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "lost_hints", pg_url, redis_url, "--steps", "10", "--rounds", "1", "--recover", "0.6",
        "--interval", "0.2", "--republish-after", "0.4",
    )  # fmt: skip
    assert "round 1 (marker   )" in out and "round 2 (time rule)" in out
    assert "hints re-sent in a run without faults" in out
    assert "re-sent / lost per broker restart" in out


@pytest.mark.slow
def test_eta_memory_measures_both_backlogs(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "eta_memory", pg_url, redis_url, "--sizes", "20,60", "--modes", "parked",
        "--due-timeout", "20", "--settle", "1.2",
    )  # fmt: skip
    assert (
        "parked backlog      20: worker RSS" in out and "parked backlog      60: worker RSS" in out
    )
    # Parked 300 s ahead: nothing released, nothing held, and the due step succeeds.
    assert "60: worker RSS" in out and " 0 hints released, 0 held by the worker" in out
    assert "parked: RSS growth 20 -> 60 waiting" in out and "still waiting" not in out


@pytest.mark.slow
def test_eta_lateness_times_both_retries_with_the_target(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "eta_lateness", pg_url, redis_url, "--steps", "6", "--min-delay", "0.5",
        "--max-delay", "1", "--timeout", "30",
    )  # fmt: skip
    assert "TOOLSAFE_ETA_JITTER=0" in out
    assert "plain Celery, eta task   p50" in out and "(n=6)" in out
    assert "toolsafe retry           p50" in out
    assert "eta lateness p99 <= 1.1x plain Celery: " in out


@pytest.mark.slow
def test_throughput_runs_all_three_modes_with_ratios(pg_url: str, redis_url: str) -> None:
    out = run_benchmark("throughput", pg_url, redis_url, "--steps", "20", "--warmup", "2")
    for label in ("no-op task", "INSERT / call / UPDATE", "bench_write adapter"):
        assert label in out
    assert "vs plain Celery, INSERT / call / UPDATE:\n    e2e" in out
    assert "db CPU" in out
    assert "worker drain" in out and "(target >= 1.0x)" in out
    # The worker's CPU split between its main process and its pool (which ran every step).
    split = re.search(r"bench_write adapter +main +([\d.]+) +pool +([\d.]+)$", out, re.MULTILINE)
    assert split is not None and float(split.group(2)) > 0, out


@pytest.mark.slow
def test_throughput_runs_toolsafe_and_its_relay_on_sqlite(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "throughput", pg_url, redis_url,
        "--steps", "10", "--warmup", "0", "--modes", "rows,toolsafe,relay", "--store", "sqlite",
    )  # fmt: skip
    assert "toolsafe store sqlite" in out and "bench_write adapter" in out
    # The relay's mode (its worker's relay publishes every hint) gets its own targets.
    assert "targets (toolsafe, the hint relay / the hand-rolled task" in out


@pytest.mark.slow
def test_relay_latency_compares_both_paths_call_by_call(pg_url: str, redis_url: str) -> None:
    out = run_benchmark("relay_latency", pg_url, redis_url, "--calls", "4", "--warmup", "1")
    assert "direct   submit → wait" in out and "relay    submit → claim" in out
    assert "the relay's difference (relay - direct):" in out


@pytest.mark.slow
def test_paired_drain_alternates_the_two_modes_chunk_by_chunk(pg_url: str, redis_url: str) -> None:
    # At WARNING the workers print no " ready." line: they are ready when they answer a ping.
    out = run_benchmark(
        "paired_drain", pg_url, redis_url,
        "--chunks", "2", "--chunk", "5", "--warmup", "1", "--loglevel", "WARNING",
    )  # fmt: skip
    assert "chunk  1 (rows     first)" in out and "chunk  2 (toolsafe first)" in out
    # Each chunk waited until the database held every call as done (rows and steps).
    assert "drain toolsafe / hand-rolled: pooled " in out and "2 chunks); target >= 1.0x " in out
    assert "steps/s drained" in out


@pytest.mark.slow
def test_recovery_latency_recovers_the_killed_step(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "recovery_latency", pg_url, redis_url,
        "--runs", "1", "--scenarios", "child", "--lease", "3", "--sweep-interval", "0.5",
    )  # fmt: skip
    assert "run 1 toolsafe child" in out and "succeeded" in out
    assert "1 effect(s)" in out  # the naive downstream stored one write, never two
    # The naive baseline task ran twice: its INSERT is the duplicate write toolsafe avoids.
    assert "child           1" in out and "2 (2 = duplicate write)" in out
    assert "child: toolsafe final" in out


@pytest.mark.slow
def test_gateway_prints_both_figures_with_their_baselines(pg_url: str, redis_url: str) -> None:
    out = run_benchmark(
        "gateway", pg_url, redis_url, "--calls", "8", "--warmup", "4", "--samples", "4"
    )
    assert "in-process Client" in out and "GatewayClient over HTTP" in out
    assert "gateway adds" in out and "one HTTP request adds" in out
    assert "change feed wake-up (LISTEN/NOTIFY)" in out and "the old polling loop" in out
    # Each target gets its verdict, whatever this tiny run's figures are.
    for target in (
        "the gateway adds to a submit-and-wait at p50 <= 2 ms: ",
        "the gateway's own CPU per view <= 1 ms: ",
        "the gateway adds to a view's wall time at p50 <= 1 ms: ",
        "Client.wait returns after a commit: p50 <= 5 ms, p99 <= 50 ms: ",
    ):
        assert re.search(re.escape(target) + "(met|NOT met)$", out, re.MULTILINE), target


def test_status_page_prints_each_page_with_and_without_its_indexes(
    pg_url: str, redis_url: str
) -> None:
    out = run_benchmark("status_page", pg_url, redis_url, "--sizes", "3000", "--rounds", "1")
    assert "    3,000     yes " in out and "    3,000      no " in out
    assert "rare ref prefix (failed): Index Scan using ix_steps_state_operation_ref" in out
    assert "rare tool, escalated: Index Scan Backward using ix_steps_tool_state_id" in out
    assert "running page (in_flight): Index Scan Backward using ix_steps_in_flight" in out


def test_metrics_scrape_prints_scrape_times_and_the_old_computation(
    pg_url: str, redis_url: str
) -> None:
    out = run_benchmark("metrics_scrape", pg_url, redis_url, "--sizes", "200,500", "--rounds", "3")
    assert "      500 steps" in out and "old whole-table" in out
    assert "old/new" in out and "catch-up s" in out
    assert "target: not measured" in out  # the target is at 10^6 steps
