"""The worker's claim and record on PostgreSQL: each is one statement committed on its
own (autocommit, no ping first), but an escalation, which commits with its handlers'
notice in one transaction. What that keeps: nothing is written twice when a pooled
connection turned out dead, no row stays locked between round trips, and the pooled
connection goes back transactional."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from tests.support.recovery.databases import end_connections
from tests.support.recovery.store_support import LEASE, POLICY, T0, WRITE, create_step, success
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.testing.envelopes import escalate

pytestmark = pytest.mark.postgres

S = StepState
RNG = random.Random(5)
OWNER = "host-a:41:9001:boot.1"


@contextmanager
def transaction_states(store: StepStore) -> Iterator[list[str]]:
    """The server's transaction status after each statement the store runs, with the
    statement's first word: ``IDLE`` when the statement committed on its own."""
    seen: list[str] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        status = conn.connection.dbapi_connection.info.transaction_status
        seen.append(f"{status.name}: {statement.split()[0]}")

    event.listen(store.engine, "after_cursor_execute", after)
    try:
        yield seen
    finally:
        event.remove(store.engine, "after_cursor_execute", after)


def test_a_claim_and_a_record_leave_no_transaction_open_between_round_trips(
    pg_store: StepStore,
) -> None:
    # A worker stopped right after its claim's UPDATE would otherwise hold the row locked,
    # hidden from the sweeper (FOR UPDATE SKIP LOCKED), until the server noticed.
    create_step(pg_store, "create_invoice", {"n": 1}, operation_ref="r1", policy=POLICY, now=T0)
    with transaction_states(pg_store) as seen:
        claim = pg_store.claim_execution("r1", OWNER, LEASE, T0)
        assert claim is not None
        recorded = pg_store.record(
            claim, Executed(success("r1")), traits=WRITE, policy=POLICY, now=T0, rng=RNG
        )
    assert recorded is not None and recorded.step.state is S.SUCCEEDED
    assert seen == ["IDLE: WITH", "IDLE: WITH"], seen
    assert [e.kind for e in pg_store.events("r1")] == ["submitted", "claimed", "executed"]


def test_an_escalation_commits_with_its_notice_in_one_transaction(pg_store: StepStore) -> None:
    create_step(pg_store, "create_invoice", {"n": 2}, operation_ref="e1", policy=POLICY, now=T0)
    claim = pg_store.claim_execution("e1", OWNER, LEASE, T0)
    assert claim is not None
    with transaction_states(pg_store) as seen:
        recorded = pg_store.record(
            claim, Executed(escalate("e1")), traits=WRITE, policy=POLICY, now=T0, rng=RNG
        )
    assert recorded is not None and recorded.step.state is S.ESCALATED
    # The step's change and the notice's INSERT ran inside one open transaction.
    assert len(seen) == 2 and all(entry.startswith("INTRANS:") for entry in seen), seen
    [notice] = pg_store.outbox.notices("e1")
    assert notice.open


def test_a_claim_and_a_record_on_connections_that_died_in_the_pool_write_once(
    pg_store: StepStore,
) -> None:
    # Not pinged first: a dead pooled connection fails the statement before it wrote
    # anything, and the infrastructure retry runs it on a new connection.
    url = pg_store.engine.url.render_as_string(hide_password=False)
    create_step(pg_store, "create_invoice", {"n": 3}, operation_ref="d1", policy=POLICY, now=T0)
    assert end_connections(url) >= 1
    claim = pg_store.claim_execution("d1", OWNER, LEASE, T0)
    assert claim is not None and claim.step.attempts == 1
    assert end_connections(url) >= 1
    recorded = pg_store.record(
        claim, Executed(success("d1")), traits=WRITE, policy=POLICY, now=T0, rng=RNG
    )
    assert recorded is not None and recorded.step.state is S.SUCCEEDED
    assert pg_store.get("d1") == recorded.step
    assert [e.kind for e in pg_store.events("d1")] == ["submitted", "claimed", "executed"]


def test_a_claim_and_a_record_leave_their_pooled_connection_transactional(
    store_pg_url: str,
) -> None:
    engine = make_engine(store_pg_url, pool_size=1, max_overflow=0)  # one connection
    try:
        store = StepStore(engine)
        create_step(store, "create_invoice", {"n": 4}, operation_ref="t1", policy=POLICY, now=T0)
        claim = store.claim_execution("t1", OWNER, LEASE, T0)
        assert claim is not None
        store.record(claim, Executed(success("t1")), traits=WRITE, policy=POLICY, now=T0, rng=RNG)
        with engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
    finally:
        engine.dispose()
