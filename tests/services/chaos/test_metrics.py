"""The counts as Prometheus metrics and as ``toolsafe stats``, read from a real store."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.recovery.store_support import create_step
from toolsafe.adapters.envelope import Retry, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import LookupFound
from toolsafe.metrics.exporter import exposition, metrics_address, read_counts, serve
from toolsafe.recovery.counts import compute_counts
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepStore
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
    """A: success. B: unknown → a refused duplicate → found committed 4 s later."""
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    migrate(url)
    store = StepStore(make_engine(url))
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


def test_read_counts_agrees_with_the_store_api(store: StepStore) -> None:
    steps = store.list_steps(limit=100)
    events = [event for step in steps for event in store.events(step.operation_ref)]
    assert read_counts(store) == compute_counts(steps, events)


def test_exposition_carries_every_count(store: StepStore) -> None:
    text = exposition(store)
    expected = [
        'toolsafe_steps{state="succeeded"} 2.0',
        'toolsafe_steps{state="verifying"} 0.0',
        'toolsafe_unknown_outcomes_resolved_total{resolution="committed"} 1.0',
        'toolsafe_unknown_outcomes_resolved_total{resolution="absent"} 0.0',
        "toolsafe_unknown_outcomes_open 0.0",
        'toolsafe_duplicate_writes_prevented_total{kind="execution_refused",'
        'reason="unknown_outcome"} 1.0',
        'toolsafe_duplicate_writes_prevented_total{kind="found_committed",'
        'reason="verification"} 1.0',
        'toolsafe_recovery_wait_seconds{quantile="0.5"} 4.0',
        'toolsafe_recovery_wait_seconds{quantile="0.99"} 4.0',
        "toolsafe_recovery_wait_seconds_count 1.0",
        'toolsafe_step_attempts_bucket{le="0"} 0.0',
        'toolsafe_step_attempts_bucket{le="1"} 2.0',
        'toolsafe_step_attempts_bucket{le="+Inf"} 2.0',
        "toolsafe_step_attempts_sum 2.0",
        "toolsafe_counts_up 1.0",
    ]
    lines = set(text.splitlines())
    missing = [line for line in expected if line not in lines]
    assert not missing, text


def test_the_exporter_answers_over_http(store: StepStore) -> None:
    server, thread = serve(store, "127.0.0.1", 0)
    try:
        reply = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert reply.status_code == 200
    assert 'toolsafe_steps{state="succeeded"} 2.0' in reply.text


def test_a_database_that_cannot_be_read_reports_down(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")  # no tables
    text = exposition(StepStore(engine))
    assert "toolsafe_counts_up 0.0" in text
    assert "toolsafe_steps" not in text
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
    assert 'toolsafe_steps{state="succeeded"} 2.0' in capsys.readouterr().out
