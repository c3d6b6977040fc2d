"""Hint bookkeeping on PostgreSQL: a statement that writes only ``published_at`` commits
without waiting for the WAL flush (``statements.UNSYNCED``), for its own transaction
alone; every statement that writes a step's state, an event or a lease still waits
for it, and a pooled connection never carries the setting into a later transaction."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from tests.support.recovery.store_support import LEASE, POLICY, T0, WRITE, create_step, success
from tests.support.recovery.stores import empty
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.store.sql import StepStore
from toolsafe.testing.envelopes import escalate

pytestmark = pytest.mark.postgres

OWNER = "host-a:41:9001:boot.1"
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Ran:
    """One statement the store ran: its first word, whether it turns the flush's wait
    off, and the transaction's setting right after it (None: it committed on its own)."""

    verb: str
    unsynced: bool
    setting: str | None


@contextmanager
def statements_run(engine: Engine) -> Iterator[list[Ran]]:
    seen: list[Ran] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        driver = conn.connection.dbapi_connection
        setting = None
        if driver.info.transaction_status.name == "INTRANS":
            setting = driver.execute("SHOW synchronous_commit").fetchone()[0]
        seen.append(Ran(statement.split()[0], "synchronous_commit" in statement, setting))

    event.listen(engine, "after_cursor_execute", after)
    try:
        yield seen
    finally:
        event.remove(engine, "after_cursor_execute", after)


@pytest.fixture
def one_connection(store_pg_url: str) -> Iterator[StepStore]:
    """An emptied store on a pool of one connection, so every call reuses the same one."""
    engine = make_engine(store_pg_url, pool_size=1, max_overflow=0)
    empty(engine)
    try:
        yield StepStore(engine)
    finally:
        engine.dispose()


def session_setting(store: StepStore) -> str:
    with store.engine.connect() as conn:
        return str(conn.execute(text("SHOW synchronous_commit")).scalar_one())


def writes(seen: list[Ran]) -> list[Ran]:
    return [ran for ran in seen if ran.verb in ("UPDATE", "WITH", "INSERT", "DELETE")]


def test_hint_bookkeeping_commits_without_waiting_for_the_flush(
    one_connection: StepStore,
) -> None:
    store = one_connection
    for n in range(4):
        create_step(store, "create_invoice", {"n": n}, operation_ref=f"s{n}", policy=POLICY, now=T0)
    later = T0 + MINUTE
    with statements_run(store.engine) as seen:
        store.mark_published("s0", later)  # one statement on its own
        assert store.take_hints(later, 10, ["s1"]) == [("s1", "create_invoice")]  # the relay's
        store.hints_not_sent(["s1"], later)  # in a transaction: s1 unsent again
        assert store.take_hints(later, 1) == [("s1", "create_invoice")]  # the catch-up's
        assert store.take_hints(later, 10, ["s2"]) == [("s2", "create_invoice")]
        due = store.due_work(later + 10 * MINUTE, limit=10, republish_after=MINUTE)
        assert {step.operation_ref for step in due} == {"s0", "s1", "s2", "s3"}
    bookkeeping = writes(seen)
    assert len(bookkeeping) == 6 and all(ran.unsynced for ran in bookkeeping), seen
    # In a transaction, the setting is off for it right after the statement...
    assert [ran.setting for ran in bookkeeping if ran.setting is not None] == ["off"] * 3
    # ...and the pooled connection's next transaction has the server's again.
    assert session_setting(store) == "on"
    assert all(store.get(f"s{n}").published_at == later + 10 * MINUTE for n in range(4))


def test_state_changes_wait_for_the_flush_after_bookkeeping_on_the_same_connection(
    one_connection: StepStore,
) -> None:
    store = one_connection
    for ref in ("r1", "r2"):
        create_step(store, "create_invoice", {"ref": ref}, operation_ref=ref, policy=POLICY, now=T0)
    now = T0 + 10 * MINUTE
    rng = random.Random(3)
    with statements_run(store.engine) as seen:
        store.due_work(now, limit=10, republish_after=MINUTE)  # bookkeeping first
        create_step(
            store, "create_invoice", {"ref": "r3"}, operation_ref="r3", policy=POLICY, now=now
        )
        for ref, envelope in (("r1", success("r1")), ("r2", escalate("r2"))):
            claim = store.claim_execution(ref, OWNER, LEASE, now)
            assert claim is not None
            recorded = store.record(
                claim, Executed(envelope), traits=WRITE, policy=POLICY, now=now, rng=rng
            )
            assert recorded is not None
    [_, *durable] = writes(seen)
    # The submit, two claims, a record on its own, and an escalation with its notice
    # in one transaction: none turns the wait off, and the transaction's setting is on.
    assert len(durable) == 6 and not any(ran.unsynced for ran in durable), seen
    assert [ran.setting for ran in durable if ran.setting is not None] == ["on", "on"], seen
    assert session_setting(store) == "on"


def test_the_relays_lookup_of_one_step_keeps_its_plan(one_connection: StepStore) -> None:
    # The driver prepares a statement after a few runs; PostgreSQL then keeps a generic
    # plan only when it estimates it no dearer than planning each call anew. With the
    # refs as an array it assumed ten of them and planned the relay's lookup on every
    # call; a single ref has a statement of its own.
    store = one_connection
    later = T0 + MINUTE
    waiting = [NewStep("create_invoice", {"w": n}, f"w{n}", POLICY) for n in range(600)]
    store.submit_many(waiting, now=T0)
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE steps"))  # the statistics autovacuum may take at any time
    for n in range(12):
        ref = f"w{n}"
        assert store.take_hints(later, 10, [ref]) == [(ref, "create_invoice")]
    assert store.take_hints(later, 10, ["w20", "w21"]) == [
        ("w20", "create_invoice"),
        ("w21", "create_invoice"),
    ]
    with store.engine.connect() as conn:
        plans = [
            (generic, custom)
            for statement, generic, custom in conn.execute(
                text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            )
            if "heard_candidates" in statement
        ]
    assert len(plans) == 1, plans  # the two refs' statement ran once: not prepared yet
    [(generic, custom)] = plans
    assert generic > 0 and custom <= 5, plans  # five custom plans first, then one kept
