"""``purge`` on PostgreSQL and SQLite: old terminal steps go with their events and
stored inputs, in batches; a step that is not terminal never does; and the CLI says what
it removed."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

import toolsafe.tasks.app
from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    create_step,
    escalate,
    sql_store,
    success,
)
from toolsafe.cli.main import EXIT_USAGE, main
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.retention import purge

S = StepState
DAY = timedelta(days=1)


def _finished(store: StepStore, ref: str, how: str, at: object = T0) -> None:
    create_step(store, "create_invoice", INPUT, operation_ref=ref, policy=POLICY, now=T0)
    if how == "pending":
        return
    if how == "cancelled":
        store.cancel(ref, by="agent", reason="x", traits=WRITE, policy=POLICY, now=T0)
        return
    claim = store.claim_execution(ref, "w", LEASE, T0)
    assert claim is not None
    if how == "in_flight":
        return
    envelope = success(ref) if how == "succeeded" else escalate(ref)
    store.record(claim, Executed(envelope), traits=WRITE, policy=POLICY, now=T0, rng=store._rng)


def _count(store: StepStore, table: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_purge_removes_old_terminal_steps_only(store: StepStore) -> None:
    for index in range(5):
        _finished(store, f"done/{index}", "succeeded")
    _finished(store, "gone/cancelled", "cancelled")
    _finished(store, "keep/escalated", "escalated")
    _finished(store, "keep/pending", "pending")
    _finished(store, "keep/in_flight", "in_flight")
    # A refused claim about a ref of a purged step: its noop event goes too.
    assert store.claim_execution("done/0", "w2", LEASE, T0) is None
    events_before = _count(store, step_events)
    dry = purge(store, T0 + DAY, batch=2, dry_run=True)
    assert (dry.steps, dry.dry_run) == (6, True) and _count(store, steps) == 9
    report = purge(store, T0 + DAY, batch=2)
    assert report.by_state == {"succeeded": 5, "cancelled": 1}
    assert (report.steps, report.batches) == (6, 3)
    assert report.events == dry.events and report.events > 6
    assert _count(store, step_events) == events_before - report.events
    for ref in ("done/0", "gone/cancelled"):
        with pytest.raises(StepNotFound):
            store.get(ref)
        assert store.events(ref) == []
    left = {step.operation_ref: step.state for step in store.list_steps()}
    assert left == {
        "keep/escalated": S.ESCALATED, "keep/pending": S.PENDING, "keep/in_flight": S.IN_FLIGHT,
    }  # fmt: skip
    # Recent steps stay; an escalated one goes only when asked for.
    assert purge(store, T0 - DAY).steps == 0
    with_escalated = purge(store, T0 + DAY, states={S.ESCALATED, S.SUCCEEDED})
    assert with_escalated.by_state == {"escalated": 1}
    assert {step.operation_ref for step in store.list_steps()} == {"keep/pending", "keep/in_flight"}
    with pytest.raises(ValueError, match="terminal"):
        purge(store, T0 + DAY, states={S.PENDING})


def test_cli_purge_says_what_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", f"sqlite:///{tmp_path / 'toolsafe.db'}")
    monkeypatch.setenv("TOOLSAFE_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
    try:
        assert main(["migrate"]) == 0
        from toolsafe.tasks.client import Client

        store = sql_store(Client().runtime.store)
        _finished(store, "old/1", "succeeded")
        _finished(store, "old/2", "escalated")
        capsys.readouterr()
        assert main(["purge", "--older-than", "1d", "--dry-run"]) == 0
        assert "would remove 1 terminal steps" in capsys.readouterr().out
        assert main(["purge", "--older-than", "2w3d"]) == 0
        out = capsys.readouterr().out
        assert "removed 1 terminal steps" in out and "succeeded 1" in out and "events" in out
        assert main(["purge", "--older-than", "1d", "--include-escalated", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["by_state"] == {"escalated": 1}
        with pytest.raises(SystemExit) as usage:
            main(["purge", "--older-than", "soon"])
        assert usage.value.code == EXIT_USAGE
    finally:
        if toolsafe.tasks.app._default is not None:
            toolsafe.tasks.app._default.runtime.close()
        monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
