"""Helpers for the store tests: traits, a row crafted by hand, and the test-only reads
and shortcuts the store itself does not ship. The envelopes are toolsafe.testing's."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import func, select, update

from toolsafe.adapters.envelope import AnySuccess
from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits
from toolsafe.recovery.reasons import NOOP_REASONS
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepRecord
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.feed import ChangeFeed
from toolsafe.tasks.runtime import Runtime
from toolsafe.testing import envelopes
from toolsafe.testing.envelopes import correct_input as correct_input
from toolsafe.testing.envelopes import escalate as escalate
from toolsafe.testing.envelopes import needs_approval as needs_approval
from toolsafe.testing.envelopes import retry_later as retry_later
from toolsafe.testing.envelopes import unknown as unknown

T0: Final = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE: Final = timedelta(seconds=30)
WRITE: Final = ToolTraits(writes=True, has_lookup=True, consistency_window=timedelta(seconds=10))
BLIND_WRITE: Final = ToolTraits(writes=True, has_lookup=False)
READ: Final = ToolTraits(writes=False, has_lookup=False)
POLICY: Final = Policy(retry=RetryPolicy(max_attempts=3), loop_guard=3)
INPUT: Final[dict[str, Any]] = {"recipient_email": "a@example.com", "amount": 120}


def success(ref: str, evidence: str = "inv_1") -> AnySuccess:
    """``toolsafe.testing.envelopes.success`` checked at ``T0`` (reproducible rows)."""
    return envelopes.success(ref, evidence, checked_at=T0)


def create_step(
    store: StepStore,
    tool: str,
    input: Mapping[str, Any],
    *,
    operation_ref: str | None,
    policy: Policy,
    now: datetime,
    published_at: datetime | None = None,
) -> tuple[StepRecord, bool]:
    """``store.submit`` answered as (step, created): what most store tests need."""
    done = store.submit(
        tool, input, operation_ref=operation_ref, policy=policy, now=now, published_at=published_at
    )
    return done.step, done.created


def counts_by_state(store: StepStore) -> dict[StepState, int]:
    """Every state with its number of steps (zero included)."""
    query = select(steps.c.state, func.count()).group_by(steps.c.state)
    with store.engine.connect() as conn:
        found = {state: count for state, count in conn.execute(query).all()}
    return {state: int(found.get(state.value, 0)) for state in StepState}


def noop_counts(store: StepStore) -> dict[str, int]:
    """Refused execution claims by reason: the duplicate writes the store prevented."""
    reason = step_events.c.detail["reason"].as_string()
    query = (
        select(reason, func.count())
        .where(step_events.c.kind == "noop", step_events.c.detail["claim"].as_string() == "execute")
        .group_by(reason)
    )
    with store.engine.connect() as conn:
        found = {key: count for key, count in conn.execute(query).all()}
    return {key: int(found.get(key, 0)) for key in NOOP_REASONS}


def force(store: StepStore, operation_ref: str, **values: Any) -> None:
    """Set columns directly: rows that only old data or another writer could produce."""
    with store.engine.begin() as conn:
        conn.execute(update(steps).where(steps.c.operation_ref == operation_ref).values(**values))


# ------------------------------------------------------------------ other processes


def contend(url: str, refs: list[str], barrier: Any, results: Any, name: str) -> None:
    """Run in a spawned process, racing the others on one database.

    First everyone claims each of ``refs`` at the same moment; then everyone drains due
    work, then expired leases, in small batches until nothing is left.
    """
    from toolsafe.recovery.db import make_engine

    engine = make_engine(url)
    store = StepStore(engine)
    won: list[str] = []
    try:
        for ref in refs:
            barrier.wait()
            if store.claim_execution(ref, name, LEASE, T0) is not None:
                won.append(f"claimed:{ref}")
        barrier.wait()
        while batch := store.due_work(T0, limit=5, republish_after=timedelta(hours=1)):
            won.extend(f"due:{step.operation_ref}" for step in batch)
        barrier.wait()
        later = T0 + timedelta(hours=1)
        while expired := store.expire_leases(later, lambda _: WRITE, lambda _: POLICY, 5):
            won.extend(f"expired:{r.step.operation_ref}" for r in expired)
        results.put((name, won))
    finally:
        engine.dispose()


def sql_store(store: object) -> StepStore:
    """The SQL store behind a runtime's port, for tests that read its tables directly."""
    assert isinstance(store, StepStore), f"not the database store: {store!r}"
    return store


def sql_feed(runtime: Runtime) -> ChangeFeed:
    """The SQL store's change feed behind a runtime (its counters and connection)."""
    feed = runtime.feed
    assert isinstance(feed, ChangeFeed), f"not the database feed: {feed!r}"
    return feed
