"""One event append (R10): PostgreSQL writes a change's event row in the same statement as
the change, SQLite in a second statement of the same transaction. The same script of
every kind of change, run on both with the same clock and jitter, writes identical rows."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from sqlalchemy import Engine, select

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    correct_input,
    escalate,
    needs_approval,
    unknown,
)
from toolsafe.adapters.protocol import FieldError, LookupFound, LookupNotFound
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

pytestmark = pytest.mark.postgres

S = StepState
MINUTE: Final = timedelta(minutes=1)
FIXED: Final = {**INPUT, "recipient_email": "billing@example.com"}
KINDS: Final = {
    "submitted",
    "claimed",
    "executed",
    "looked_up",
    "lease_expired",
    "input_provided",
    "approved",
    "rejected",
    "cancelled",
    "resolved",
    "noop",
}
"""Every kind of event the store writes: the script below writes each one."""


def _valid(_: Any) -> list[FieldError]:
    return []


def _run(store: StepStore, ref: str, envelope: Any, now: Any, rng: random.Random) -> None:
    claim = store.claim_execution(ref, "worker-1", LEASE, now)
    assert claim is not None
    assert store.record(claim, Executed(envelope), traits=WRITE, policy=POLICY, now=now, rng=rng)


def _script(store: StepStore) -> None:
    """Every change the store makes, each at a fixed time, jitter from a fixed seed."""
    rng = random.Random(11)
    rules: dict[str, Any] = {"traits": WRITE, "policy": POLICY}
    for ref in ("e/unknown", "e/human", "e/approve", "e/lease", "e/reject"):
        store.submit("create_invoice", INPUT, operation_ref=ref, policy=POLICY, now=T0)
    # An unknown outcome, verified: found absent after the window, retried, then found.
    _run(store, "e/unknown", unknown("e/unknown"), T0, rng)
    assert store.claim_execution("e/unknown", "worker-2", LEASE, T0) is None  # noop
    later = T0 + MINUTE
    claim = store.claim_verification("e/unknown", "worker-2", LEASE, later)
    assert claim is not None
    store.record(claim, LookedUp(LookupNotFound(checked_at=later)), now=later, rng=rng, **rules)
    _run(store, "e/unknown", unknown("e/unknown"), later, rng)
    again = T0 + 2 * MINUTE
    claim = store.claim_verification("e/unknown", "worker-2", LEASE, again)
    assert claim is not None
    found = LookupFound(checked_at=again, result={"id": 1}, evidence_ref="inv_1")
    store.record(claim, LookedUp(found), now=again, rng=rng, **rules)
    # A human's answers: corrected input, approval, escalation, re-drive, cancellation.
    _run(store, "e/human", correct_input("e/human"), T0, rng)
    store.provide_input("e/human", FIXED, validate=_valid, now=T0, **rules)
    _run(store, "e/approve", needs_approval("e/approve"), T0, rng)
    digest = store.get("e/approve").input_hash
    store.approve("e/approve", approver="ann", reason="ok", input_hash=digest, now=T0, **rules)
    _run(store, "e/human", escalate("e/human"), T0, rng)
    store.resolve("e/human", operator="op", reason="retry", to=S.PENDING, now=T0, **rules)
    store.cancel("e/human", by="agent", reason="not needed", now=T0, **rules)
    # A lost lease (the sweeper), and a rejection.
    assert store.claim_execution("e/lease", "worker-1", LEASE, T0) is not None
    expired = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, rng=rng)
    assert [recorded.step.state for recorded in expired] == [S.VERIFYING]
    _run(store, "e/reject", needs_approval("e/reject"), T0, rng)
    store.reject("e/reject", approver="ann", reason="no", now=T0, **rules)
    assert store.claim_execution("e/ghost", "worker-1", LEASE, T0) is None  # noop, no step


def _events(engine: Engine) -> list[tuple[Any, ...]]:
    """Every event row, with its step named by operation_ref (ids are the database's)."""
    query = (
        select(step_events, steps.c.operation_ref.label("step_ref"))
        .outerjoin(steps, steps.c.id == step_events.c.step_id)
        .order_by(step_events.c.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        (
            row.operation_ref,
            row.step_ref,
            row.at,
            row.kind,
            row.from_state,
            row.to_state,
            row.label,
            dict(row.detail),
        )
        for row in rows
    ]


@pytest.fixture
def sqlite_engine(sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:
    path = tmp_path / "events.db"
    shutil.copyfile(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


def test_both_dialects_write_identical_event_rows(
    pg_store: StepStore, sqlite_engine: Engine
) -> None:
    written = {}
    engines = {"postgresql": pg_store.engine, "sqlite": sqlite_engine}
    for name, engine in engines.items():
        store = StepStore(engine, rng=random.Random(5))
        _script(store)
        written[name] = _events(store.engine)
    postgres, sqlite = written["postgresql"], written["sqlite"]
    assert {event[3] for event in postgres} == KINDS
    assert len(postgres) == len(sqlite)
    for pg_event, sqlite_event in zip(postgres, sqlite, strict=True):
        assert pg_event == sqlite_event
    # Each change's event names the step it moved, in the same transaction (R10).
    assert all(event[1] == event[0] for event in postgres if event[0] != "e/ghost")
    assert [event[1] for event in postgres if event[0] == "e/ghost"] == [None]
