"""One claim guard (R3): the SQL ``WHERE`` PostgreSQL claims with and the Python refusal
that names the no-op reason come from one table (``toolsafe.recovery.guards``); here they
are proved to agree on every state, commit_state, attempt count, due time and lease, on
real PostgreSQL and on SQLite, through the compiled predicate and through the store."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, bindparam, delete, insert, select

from tests.support.recovery.store_support import LEASE, T0
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.guards import EXECUTION, VERIFICATION
from toolsafe.recovery.reasons import NOOP_MISSING
from toolsafe.recovery.records import ClaimKind
from toolsafe.recovery.rows import claim_refused, execution_refusal, verification_refusal
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import LABELS, StepState
from toolsafe.recovery.store import Refused
from toolsafe.recovery.store.sql import StepStore

S = StepState
SECOND: Final = timedelta(seconds=1)
COMMIT_STATES: Final = (None, "not_committed", "committed", "unknown")
OFFSETS: Final = (None, -SECOND, timedelta(0), SECOND)  # None, past, exactly now, future
ATTEMPTS: Final = ((0, 1), (1, 1), (1, 3), (2, 3), (3, 3))  # (attempts, max_attempts)
NOW_PARAM: Final = bindparam("now", type_=steps.c.updated_at.type)


@pytest.fixture(scope="module")
def sqlite_engine(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    path = tmp_path_factory.mktemp("guard") / "steps.db"
    shutil.copyfile(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """A migrated database of each dialect, its guard rows removed first."""
    name = "store_pg_engine" if request.param == "postgresql" else "sqlite_engine"
    found: Engine = request.getfixturevalue(name)
    _clear(found)
    return found


def _clear(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(step_events).where(step_events.c.operation_ref.startswith("guard/")))
        conn.execute(delete(steps).where(steps.c.operation_ref.startswith("guard/")))


def _row(
    ref: str,
    state: StepState,
    commit_state: str | None,
    attempts: int,
    maximum: int,
    due: timedelta | None,
    lease: timedelta | None,
    version: int = 1,
) -> dict[str, Any]:
    return {
        "operation_ref": ref,
        "tool": "t",
        "input": {},
        "input_hash": "h",
        "state": state.value,
        "commit_state": commit_state,
        "attempts": attempts,
        "max_attempts": maximum,
        "verification_attempts": 0,
        "lookups_unavailable": 0,
        "due_at": None if due is None else T0 + due,
        "lease_owner": None if lease is None else "someone",
        "lease_expires_at": None if lease is None else T0 + lease,
        "flagged_fields": [],
        "fingerprint_repeats": 0,
        "version": version,
        "created_at": T0 - timedelta(hours=1),
        "updated_at": T0 - timedelta(hours=1),
    }


def _every_row() -> list[dict[str, Any]]:
    combos = itertools.product(StepState, COMMIT_STATES, ATTEMPTS, OFFSETS, OFFSETS)
    return [
        _row(f"guard/{n}", state, commit, attempts, maximum, due, lease)
        for n, (state, commit, (attempts, maximum), due, lease) in enumerate(combos)
    ]


# ------------------------------------------------------------------ the compiled predicate


def test_the_sql_guard_matches_exactly_the_rows_python_lets_claim(engine: Engine) -> None:
    """Every combination at once: the ``WHERE`` the PostgreSQL claim runs, evaluated by
    each database, against ``execution_refusal`` on the same rows as read back."""
    rows = _every_row()
    with engine.begin() as conn:
        conn.execute(insert(steps), rows)
    query = select(steps.c.operation_ref).where(
        steps.c.operation_ref.startswith("guard/"), *EXECUTION.where(steps, NOW_PARAM)
    )
    with engine.connect() as conn:
        matched = set(conn.execute(query, {"now": T0}).scalars())
        stored = conn.execute(select(steps).where(steps.c.operation_ref.startswith("guard/"))).all()
    assert len(stored) == len(rows) == 10 * 4 * 5 * 4 * 4
    allowed = {row.operation_ref for row in stored if execution_refusal(row, T0) is None}
    assert matched == allowed
    # Not vacuous: some rows of each claimable state pass, and most do not.
    claimed_states = {row.state for row in stored if row.operation_ref in allowed}
    assert claimed_states == {S.PENDING.value, S.WAITING_RETRY.value}
    assert 0 < len(allowed) < len(stored) // 10


# ------------------------------------------------------------------ through the store

STATES = st.sampled_from(list(StepState))
OFFSET = st.one_of(st.none(), st.integers(-2, 2).map(lambda s: timedelta(seconds=s)))


@st.composite
def guarded_rows(draw: st.DrawFn) -> dict[str, Any]:
    maximum = draw(st.integers(1, 3))
    return _row(
        "guard/claim",
        draw(STATES),
        draw(st.sampled_from(COMMIT_STATES)),
        draw(st.integers(0, maximum)),
        maximum,
        draw(OFFSET),
        draw(OFFSET),
        draw(st.integers(1, 5)),
    )


def _place(store: StepStore, values: dict[str, Any]) -> Any:
    with store.engine.begin() as conn:
        conn.execute(
            delete(step_events).where(step_events.c.operation_ref == values["operation_ref"])
        )
        conn.execute(delete(steps).where(steps.c.operation_ref == values["operation_ref"]))
        conn.execute(insert(steps), [values])
    with store.engine.connect() as conn:
        return conn.execute(
            select(steps).where(steps.c.operation_ref == values["operation_ref"])
        ).one()


def _claim_answer(store: StepStore, values: dict[str, Any], verify: bool) -> tuple[Any, ...]:
    """What one claim did on ``store``: (refusal or None, the step's and event's facts)."""
    ref = values["operation_ref"]
    before = _place(store, values)
    expected = (verification_refusal if verify else execution_refusal)(before, T0)
    kind: ClaimKind = "verify" if verify else "execute"
    claim = store.claim(kind, ref, "worker", LEASE, T0)
    assert isinstance(claim, Refused) == (expected is not None), (values, expected)
    event = store.events(ref)[-1]
    after = store.get(ref)
    if isinstance(claim, Refused):
        # The answer names the event's reason, and the due time when only time stood in
        # the way (an early hint, tasks/early.py): as the guard says in Python.
        assert claim == claim_refused(kind, before, T0)
        assert (claim.due_at is not None) == (
            expected == "not_due"
            and (VERIFICATION if verify else EXECUTION).refusal(before, before.due_at or T0) is None
        )
        assert (event.kind, event.detail["reason"]) == ("noop", expected)
        assert event.from_state == event.to_state == before.state
        assert after.version == before.version  # nothing moved
    else:
        assert claim.step == after and after.version == before.version + 1
        assert (after.lease_owner, after.lease_expires_at) == ("worker", T0 + LEASE)
        assert (event.kind, event.from_state) == ("claimed", S(before.state))
        if verify:
            assert after.state is S.VERIFYING and after.attempts == before.attempts
        else:
            assert after.state is S.IN_FLIGHT and after.attempts == before.attempts + 1
            assert event.label == LABELS[(S(before.state), S.IN_FLIGHT)]
            assert event.detail["attempt"] == after.attempts
    return (
        expected,
        claim.due_at if isinstance(claim, Refused) else None,
        event.kind,
        event.label,
        event.from_state,
        event.to_state,
        {key: value for key, value in event.detail.items()},
        after.state,
        after.attempts,
        after.version,
    )


@pytest.fixture(scope="module")
def both(store_pg_engine: Engine, sqlite_engine: Engine) -> dict[str, StepStore]:
    return {"postgresql": StepStore(store_pg_engine), "sqlite": StepStore(sqlite_engine)}


@pytest.mark.postgres
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=guarded_rows(), verify=st.booleans())
def test_claims_on_both_dialects_agree_with_the_python_refusal(
    both: dict[str, StepStore], values: dict[str, Any], verify: bool
) -> None:
    answers = {name: _claim_answer(store, values, verify) for name, store in both.items()}
    assert answers["postgresql"] == answers["sqlite"]


@pytest.mark.postgres
def test_a_claim_for_a_missing_step_is_refused_as_missing_on_both(
    both: dict[str, StepStore],
) -> None:
    for store in both.values():
        _clear(store.engine)
        for claim in (store.claim_execution, store.claim_verification):
            assert claim("guard/ghost", "worker", LEASE, T0) is None
            assert store.events("guard/ghost")[-1].detail["reason"] == NOOP_MISSING
    assert EXECUTION.refusal(None, T0) == VERIFICATION.refusal(None, T0) == NOOP_MISSING


def test_the_boundaries_are_inclusive_on_due_and_exclusive_on_a_live_lease() -> None:
    """``due_at == now`` is due; a lease ending exactly now is over (both guards)."""

    def record(**changes: Any) -> Any:
        values = _row("guard/x", S.PENDING, None, 0, 1, timedelta(0), None)
        values.update(changes)
        return type("Row", (), values)()

    now: datetime = T0
    assert EXECUTION.refusal(record(), now) is None
    assert EXECUTION.refusal(record(due_at=now + SECOND), now) == "not_due"
    assert EXECUTION.refusal(record(due_at=None), now) == "not_due"
    verifying = {"state": S.VERIFYING.value, "commit_state": "unknown"}
    assert VERIFICATION.refusal(record(**verifying, lease_expires_at=now), now) is None
    live = record(**verifying, lease_expires_at=now + SECOND)
    assert VERIFICATION.refusal(live, now) == "claimed"
