"""The store-wide exporter against real stores: its figures after a baseline and after
each poll, over HTTP, with two exporters side by side, with an event id that commits
after a later one (PostgreSQL), and the queue depth of a real Redis and file broker."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.support.metrics.truth import both
from tests.support.pipeline.harness import fresh_database
from tests.support.recovery.store_support import create_step, escalate
from toolsafe.adapters.envelope import Retry, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import LookupFound
from toolsafe.celeryconfig import QUEUES
from toolsafe.metrics.exporter import Exporter, exposition, metrics_address, serve
from toolsafe.metrics.follower import EventFollower
from toolsafe.metrics.queues import QueueDepth
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.tally import SqlTally, events_after, settled_position
from toolsafe.settings import Settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TRAITS = ToolTraits(writes=True, has_lookup=True)
POLICY = Policy()


def at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def unknown(ref: str) -> ToolError:
    return ToolError(
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="verify_operation",
        operation_ref=ref,
        agent_message="Unknown.",
        user_message="Unknown.",
    )


@pytest.fixture
def store(tmp_path: Path) -> StepStore:
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    migrate(url)
    return fill(StepStore(make_engine(url)))


def fill(store: StepStore) -> StepStore:
    """A: success. B: unknown → a refused duplicate → found committed 4 s later."""
    rng = random.Random(0)
    lease = timedelta(seconds=5)
    for ref in ("A", "B"):
        create_step(
            store, "create_invoice", {"r": ref}, operation_ref=ref, policy=POLICY, now=at(0)
        )
    claim = store.claim_execution("A", "w", lease, at(1))
    assert claim is not None
    success = ToolSuccess[Any](
        operation_ref="A", result={}, verification=Verification(checked_at=at(1))
    )
    store.record(claim, Executed(success), traits=TRAITS, policy=POLICY, now=at(1), rng=rng)
    claim = store.claim_execution("B", "w", lease, at(1))
    assert claim is not None
    store.record(claim, Executed(unknown("B")), traits=TRAITS, policy=POLICY, now=at(2), rng=rng)
    assert store.claim_execution("B", "w2", lease, at(3)) is None
    verify = store.claim_verification("B", "w", lease, at(6))
    assert verify is not None
    found = LookedUp(LookupFound(checked_at=at(6), result={}, evidence_ref="inv/B"))
    done = store.record(verify, found, traits=TRAITS, policy=POLICY, now=at(6), rng=rng)
    assert done is not None and done.step.state is StepState.SUCCEEDED
    return store


TOOL = "create_invoice"


def lines_of(text: str) -> set[str]:
    return set(text.splitlines())


def test_exposition_carries_every_figure(store: StepStore) -> None:
    expected = [
        f'toolsafe_steps{{state="succeeded",tool="{TOOL}"}} 2.0',
        f'toolsafe_steps{{state="verifying",tool="{TOOL}"}} 0.0',
        f'toolsafe_steps_submitted_total{{tool="{TOOL}"}} 2.0',
        f'toolsafe_executions_total{{tool="{TOOL}"}} 2.0',
        f'toolsafe_steps_finished_total{{state="succeeded",tool="{TOOL}"}} 2.0',
        f'toolsafe_unknown_outcomes_resolved_total{{resolution="committed",tool="{TOOL}"}} 1.0',
        f'toolsafe_lookups_total{{result="found",tool="{TOOL}"}} 1.0',
        "toolsafe_unknown_outcomes_open 0.0",
        'toolsafe_duplicate_writes_prevented_total{kind="execution_refused",'
        'reason="unknown_outcome"} 1.0',
        'toolsafe_duplicate_writes_prevented_total{kind="found_committed",'
        'reason="verification"} 1.0',
        # B waited 4 s in verifying (2 s → 6 s).
        f'toolsafe_recovery_wait_seconds_bucket{{le="2.5",tool="{TOOL}"}} 0.0',
        f'toolsafe_recovery_wait_seconds_bucket{{le="5.0",tool="{TOOL}"}} 1.0',
        f'toolsafe_recovery_wait_seconds_count{{tool="{TOOL}"}} 1.0',
        f'toolsafe_recovery_wait_seconds_sum{{tool="{TOOL}"}} 4.0',
        # A finished 1 s after submission, B 6 s after.
        f'toolsafe_step_duration_seconds_bucket{{le="1.0",tool="{TOOL}"}} 1.0',
        f'toolsafe_step_duration_seconds_bucket{{le="5.0",tool="{TOOL}"}} 1.0',
        f'toolsafe_step_duration_seconds_bucket{{le="10.0",tool="{TOOL}"}} 2.0',
        f'toolsafe_step_duration_seconds_bucket{{le="+Inf",tool="{TOOL}"}} 2.0',
        f'toolsafe_step_duration_seconds_sum{{tool="{TOOL}"}} 7.0',
        "toolsafe_counts_up 1.0",
    ]
    missing = [line for line in expected if line not in lines_of(exposition(SqlTally(store)))]
    assert not missing, exposition(SqlTally(store))


def test_a_baseline_plus_polls_equals_a_new_baseline(store: StepStore) -> None:
    exporter = Exporter(SqlTally(store))
    exporter.poll()
    ref = "C"
    create_step(store, TOOL, {"r": ref}, operation_ref=ref, policy=POLICY, now=at(10))
    claim = store.claim_execution(ref, "w", timedelta(seconds=5), at(11))
    assert claim is not None
    store.record(
        claim, Executed(escalate(ref)), traits=TRAITS, policy=POLICY, now=at(12),
        rng=random.Random(0),
    )  # fmt: skip
    assert exporter.poll() == 3
    later = Exporter(SqlTally(store))
    later.poll()

    def figures(text: str) -> list[str]:
        return [line for line in text.splitlines() if "poll_seconds" not in line]

    assert figures(exporter.text()) == figures(later.text())
    assert f'toolsafe_escalations_total{{reason="VERSION_CONFLICT",tool="{TOOL}"}} 1.0' in lines_of(
        exporter.text()
    )
    mine, truth = both(store, exporter)
    assert mine == truth


def test_two_exporters_each_give_the_store_figure_not_a_share(store: StepStore) -> None:
    first, second = both(store), both(store)
    assert first[0] == second[0] == first[1]
    assert first[0]["submitted"] == 2  # the steps there are, not 2 per exporter


def test_the_exporter_answers_over_http(store: StepStore) -> None:
    served = serve(Exporter(SqlTally(store), poll_interval=0.05))
    try:
        served.exporter.caught_up.wait(10)
        reply = httpx.get(f"http://127.0.0.1:{served.port}/metrics", timeout=5)
    finally:
        served.close()
    assert reply.status_code == 200
    assert f'toolsafe_steps{{state="succeeded",tool="{TOOL}"}} 2.0' in reply.text


def test_a_database_that_cannot_be_read_reports_down(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")  # no tables
    text = exposition(SqlTally(StepStore(engine)))
    assert "toolsafe_counts_up 0.0" in text
    assert "toolsafe_steps{" not in text
    engine.dispose()


def test_metrics_address_from_the_environment() -> None:
    def address(env: dict[str, str]) -> tuple[str, int] | None:
        return metrics_address(Settings.from_env(env))

    assert address({}) is None
    assert address({"TOOLSAFE_METRICS_PORT": "9808"}) == ("127.0.0.1", 9808)
    assert address({"TOOLSAFE_METRICS_PORT": "0", "TOOLSAFE_METRICS_ADDRESS": "0.0.0.0"}) == (
        "0.0.0.0",
        0,
    )
    with pytest.raises(ValueError, match="TOOLSAFE_METRICS_PORT"):
        address({"TOOLSAFE_METRICS_PORT": "http"})
    with pytest.raises(ValueError, match="between 0 and 65535"):
        address({"TOOLSAFE_METRICS_PORT": "70000"})


def test_toolsafe_stats_prints_the_counts(
    store: StepStore, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsafe.cli.main import main

    url = store.engine.url.render_as_string(hide_password=False)
    assert main(["stats", "--database", url]) == 0
    text = capsys.readouterr().out
    assert "found committed 1, found absent 0" in text
    assert "executions refused: unknown_outcome 1 (total 1)" in text
    assert main(["stats", "--database", url, "--json", "--prefix", "B"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["steps"] == 1
    assert data["recovery_wait_seconds"]["p50"] == 4.0
    assert main(["stats", "--database", url, "--prometheus"]) == 0
    assert f'toolsafe_steps{{state="succeeded",tool="{TOOL}"}} 2.0' in capsys.readouterr().out


# ----------------------------------------------------------------- PostgreSQL commits

NOOP_SQL = text(
    "INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label,"
    " detail) SELECT id, operation_ref, now(), 'noop', state, state, 'verify claim refused',"
    ' \'{"claim": "verify", "reason": "not_due"}\' FROM steps WHERE operation_ref = \'G\''
    " RETURNING id"
)


@pytest.mark.postgres
def test_an_event_id_that_commits_after_a_later_one_is_counted_once(pg_url: str) -> None:
    with fresh_database(pg_url, "metrics_gap") as url:
        engine = make_engine(url)
        store = StepStore(engine)
        create_step(store, TOOL, {"r": "G"}, operation_ref="G", policy=POLICY, now=at(0))
        exporter = Exporter(SqlTally(store))
        exporter.poll()
        idle = "verify:not_due"

        def folded() -> int:
            return exporter.follower.tally.prevented.get(("idle_redelivery", idle), 0)

        with engine.connect() as slow, engine.connect() as fast, engine.connect() as undone:
            slow.begin()
            early = slow.execute(NOOP_SQL).scalar_one()  # takes its id, commits last
            with fast.begin():
                late = fast.execute(NOOP_SQL).scalar_one()
            undone.begin()
            lost = undone.execute(NOOP_SQL).scalar_one()
            undone.rollback()  # its id is never used
            with fast.begin():
                last = fast.execute(NOOP_SQL).scalar_one()
            assert early < late < lost < last
            assert exporter.poll() == 2 and folded() == 2
            assert set(exporter.follower.awaited) == {early, lost}
            slow.commit()
        assert exporter.poll() == 1 and folded() == 3
        assert set(exporter.follower.awaited) == {lost}
        assert exporter.poll() == 0 and folded() == 3
        exporter.follower.gap_timeout = 0.0  # the rolled-back id is given up
        exporter.poll()
        assert not exporter.follower.awaited and exporter.follower.abandoned == 1
        assert both(store, exporter)[0] == both(store)[1]
        engine.dispose()


@pytest.mark.postgres
def test_the_history_grouped_in_postgresql_equals_the_event_by_event_fold(pg_url: str) -> None:
    with fresh_database(pg_url, "metrics_history") as url:
        engine = make_engine(url)
        try:
            check_grouped_history(fill(StepStore(engine)))
        finally:
            engine.dispose()


def check_grouped_history(store: StepStore) -> None:
    """The same store read grouped (its history) and event by event: equal tallies."""
    for ref in ("C", "D"):
        create_step(store, TOOL, {"r": ref}, operation_ref=ref, policy=POLICY, now=at(10))
        claim = store.claim_execution(ref, "w", timedelta(seconds=5), at(11))
        assert claim is not None
        store.record(
            claim, Executed(escalate(ref)), traits=TRAITS, policy=POLICY, now=at(12),
            rng=random.Random(0),
        )  # fmt: skip
    # Every event so far is older than the gap timeout (read grouped), this one is not
    # (read one by one).
    create_step(store, TOOL, {"r": "E"}, operation_ref="E", policy=POLICY, now=datetime.now(UTC))
    assert settled_position(store, datetime.now(UTC) - timedelta(seconds=60)) == 15
    grouped = Exporter(SqlTally(store))
    grouped.poll()
    assert grouped.follower.position == 16 and grouped.follower.polls == 1
    one_by_one = EventFollower(partial(events_after, store))
    one_by_one.poll()
    assert grouped.follower.tally == one_by_one.tally
    assert grouped.follower.tally.events == 16
    assert both(store, grouped)[0] == both(store)[1]


# ----------------------------------------------------------------------- queue depth


@pytest.mark.redis
def test_queue_depth_on_a_real_redis(redis_url: str) -> None:
    import redis

    queues = [f"metrics-test-{uuid.uuid4().hex[:8]}.{name}" for name in ("execute", "verify")]
    client = redis.Redis.from_url(redis_url)
    try:
        client.rpush(queues[0], "a", "b", "c")
        client.rpush(f"{queues[0]}\x06\x169", "urgent")  # a message with priority 9
        depth = QueueDepth(redis_url, queues)
        assert depth.depths() == {queues[0]: 4, queues[1]: 0}
        depth.close()
    finally:
        client.delete(queues[0], f"{queues[0]}\x06\x169")
        client.close()
    down = QueueDepth("redis://127.0.0.1:1/0", queues, timeout=0.5)
    with pytest.raises(redis.ConnectionError):
        down.depths()


def test_queue_depth_of_the_file_broker(tmp_path: Path) -> None:
    folder = tmp_path / "broker" / "queue"
    folder.mkdir(parents=True)
    for n, queue in enumerate(["toolsafe.execute", "toolsafe.execute", "toolsafe.verify"]):
        (folder / f"{n}_{uuid.uuid4()}.{queue}.msg").write_text("{}", encoding="utf-8")
    (folder / "partial-write").write_text("", encoding="utf-8")
    depth = QueueDepth(f"filesystem://{tmp_path / 'broker'}", QUEUES)
    assert depth.depths() == {
        "toolsafe.execute": 2, "toolsafe.verify": 1, "toolsafe.escalations": 0,
        "toolsafe.sweep": 0,
    }  # fmt: skip
    assert QueueDepth("amqp://guest@localhost//", QUEUES).depths() is None


def test_the_exporter_shows_queue_depth_and_says_when_the_broker_is_down(
    store: StepStore, tmp_path: Path
) -> None:
    (tmp_path / "broker" / "queue").mkdir(parents=True)
    (tmp_path / "broker" / "queue" / f"1_{uuid.uuid4()}.toolsafe.verify.msg").touch()
    exporter = Exporter(
        SqlTally(store), queues=QueueDepth(f"filesystem://{tmp_path / 'broker'}", QUEUES)
    )
    exporter.poll()
    shown = lines_of(exporter.text())
    assert 'toolsafe_queue_messages{queue="toolsafe.verify"} 1.0' in shown
    assert "toolsafe_queue_up 1.0" in shown
    down = Exporter(
        SqlTally(store), queues=QueueDepth("redis://127.0.0.1:1/0", QUEUES, timeout=0.5)
    )
    down.poll()
    assert "toolsafe_queue_up 0.0" in lines_of(down.text())


# ------------------------------------------------------------------ toolsafe metrics


def test_toolsafe_metrics_without_a_port_says_what_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toolsafe.cli.main import main

    assert main(["metrics"]) == 2
    assert capsys.readouterr().err == (
        "toolsafe: error: give --port or set TOOLSAFE_METRICS_PORT\n"
    )
