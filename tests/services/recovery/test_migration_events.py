"""Migration 0007 on a store of 10^5 steps in every state (built with bulk SQL at 0006,
not through the API), on PostgreSQL and SQLite: every step reads back as it was (state,
lease, due time, attempts, version, envelope), every event reads back as it was, the
events whose envelope their step holds no longer copy it, and the downgrade writes the
copies back."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from sqlalchemy import Connection, Engine, bindparam, select, text

from toolsafe.recovery.db import alembic_config, make_engine, normalize_url
from toolsafe.recovery.records import EventRecord, event_record, step_record
from toolsafe.recovery.schema import UTCDateTime, step_events, steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import with_envelopes
from toolsafe.recovery.store.sql import StepStore

STEPS = 100_000
STATES = [state.value for state in StepState]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=30)  # leases run out
T2 = T0 + timedelta(hours=1)  # parked delays fall due
# The step holds the adapter's envelope (the event's copy becomes a name) in these
# states; in the others it holds the runtime's own, and the event keeps its copy.
HELD = ("waiting_retry", "needs_input", "awaiting_approval", "succeeded")
_STATE = f"CASE i % {len(STATES)} " + " ".join(
    f"WHEN {index} THEN '{state}'" for index, state in enumerate(STATES)
)


def _envelope(code: str, commit_state: str) -> str:
    """A JSON text built in SQL, with the step's number in it."""
    return (
        f"""'{{"ok": false, "code": "{code}", "commit_state": "{commit_state}", """
        """"operation_ref": "bulk-' || CAST(i AS TEXT) || '", "safe_details": {"n": ' """
        """|| CAST(i AS TEXT) || '}}'"""
    )


_INPUT = """'{"n": ' || CAST(i AS TEXT) || '}'"""
_SUBMITTED = """'{"tool": "create_invoice", "max_attempts": 3}'"""
_CLAIMED = """'{"claim": "execute", "owner": "host:1:worker"}'"""
_NOOP = """'{"claim": "execute", "reason": "no_such_step"}'"""


def _steps_sql(json: str) -> str:
    outcome = (
        "CASE WHEN state IN ('pending', 'in_flight') THEN NULL "
        f"WHEN state IN {HELD} THEN {json.format(_envelope('ADAPTER', 'not_committed'))} "
        f"ELSE {json.format(_envelope('RUNTIME', 'unknown'))} END"
    )
    return f"""
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {STEPS}),
numbered AS (SELECT i, {_STATE} END AS state FROM g)
INSERT INTO steps (operation_ref, tool, input, input_hash, state, commit_state, attempts,
    max_attempts, verification_attempts, lookups_unavailable, due_at, lease_owner,
    lease_expires_at, last_sent_at, last_envelope, fingerprint_repeats, flagged_fields,
    published_at, version, created_at, updated_at)
SELECT 'bulk-' || CAST(i AS TEXT), 'create_invoice',
    {json.format(_INPUT)}, 'hash-' || CAST(i AS TEXT),
    state,
    CASE WHEN state = 'succeeded' THEN 'committed' ELSE NULL END,
    CASE WHEN state = 'pending' THEN 0 ELSE 1 + i % 2 END, 3, i % 2, 0,
    CASE WHEN state IN ('pending', 'waiting_retry', 'verifying')
         THEN (CASE WHEN state = 'pending' THEN :t0 ELSE :t2 END) ELSE NULL END,
    CASE WHEN state = 'in_flight' OR (state = 'verifying' AND i % 3 = 0)
         THEN 'host:' || CAST(i % 7 AS TEXT) || '/worker' ELSE NULL END,
    CASE WHEN state = 'in_flight' OR (state = 'verifying' AND i % 3 = 0) THEN :t1 ELSE NULL END,
    CASE WHEN state = 'pending' THEN NULL ELSE :t0 END,
    CASE WHEN state IN ('pending', 'in_flight') THEN NULL ELSE {outcome} END,
    0, {json.format("'[]'")},
    CASE WHEN state = 'waiting_retry' AND i % 2 = 0 THEN NULL ELSE :t0 END,
    1 + i % 7, :t0, :t0
FROM numbered
"""  # noqa: S608


def _events_sql(json: str) -> str:
    # The adapter's envelope, as the steps in HELD hold it.
    adapter = _envelope("ADAPTER", "not_committed")
    detail = json.format(
        """'{"envelope": ' || """ + adapter + """ || ', "action": "' || state || '"}'"""
    )
    i = "CAST(substr(operation_ref, 6) AS INTEGER)"
    return f"""
INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label, detail)
SELECT id, operation_ref, :t0, 'submitted', NULL, 'pending', 'submitted',
       {json.format(_SUBMITTED)}
FROM steps
UNION ALL
SELECT id, operation_ref, :t0, 'claimed', 'pending', 'in_flight', 'claimed',
       {json.format(_CLAIMED)}
FROM steps WHERE state != 'pending'
UNION ALL
SELECT id, operation_ref, :t0, 'executed', 'in_flight', state, 'executed',
       {detail.replace("CAST(i AS TEXT)", f"CAST({i} AS TEXT)")}
FROM steps WHERE state NOT IN ('pending', 'in_flight')
UNION ALL
SELECT NULL, 'nothing-' || CAST(id AS TEXT), :t0, 'noop', NULL, NULL, 'execute claim refused',
       {json.format(_NOOP)}
FROM steps WHERE id % 1000 = 0
"""  # noqa: S608


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A database at 0006 holding 10^5 steps in every state and their events."""
    admin = name = None
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
        json = "{}"
    else:
        base = normalize_url(request.getfixturevalue("pg_url"))
        name = f"{base.database}_events_0007"
        admin = base.set(drivername="postgresql", database="postgres").render_as_string(False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        engine = make_engine(base.set(database=name))
        json = "CAST({} AS jsonb)"
    url = engine.url.render_as_string(hide_password=False)
    command.upgrade(alembic_config(url), "0006_worker_heartbeats")
    times = [bindparam(key, when, type_=UTCDateTime()) for key, when in _TIMES.items()]
    with engine.begin() as conn:
        conn.execute(text(_steps_sql(json)).bindparams(*times))
        conn.execute(text(_events_sql(json)).bindparams(times[0]))
    yield engine
    engine.dispose()
    if admin is not None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_TIMES = {"t0": T0, "t1": T1, "t2": T2}
_JSON = ("input", "last_envelope", "flagged_fields", "detail")


_COLUMNS = {
    # JSON as text: compared as stored, without decoding 10^5 documents per read.
    "steps": ", ".join(
        f"CAST({column.name} AS TEXT)" if column.name in _JSON else column.name
        for column in steps.columns
    ),
    "step_events": ", ".join(
        f"CAST({column.name} AS TEXT)" if column.name in _JSON else column.name
        for column in step_events.columns
    ),
}


def _raw(conn: Connection, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as the driver gives them (JSON as text): compared as stored."""
    query = f"SELECT {_COLUMNS[table]} FROM {table} ORDER BY id"  # noqa: S608 - own names
    return [tuple(row) for row in conn.exec_driver_sql(query)]


def _document(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _changed(before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]) -> list[Any]:
    """The rows whose detail (the last column) changed, as (row before, detail after);
    every other column is the same in every row."""
    assert [row[:-1] for row in after] == [row[:-1] for row in before]
    return [
        (old, _document(new[-1]))
        for old, new in zip(before, after, strict=True)
        if old[-1] != new[-1] and _document(old[-1]) != _document(new[-1])
    ]


@pytest.mark.timeout(300)
def test_every_step_and_event_reads_back_after_the_migration(old_store: Engine) -> None:
    url = old_store.url.render_as_string(hide_password=False)
    with old_store.connect() as conn:
        steps_before, events_before = _raw(conn, "steps"), _raw(conn, "step_events")
    assert len(steps_before) == STEPS and len(events_before) > 2 * STEPS

    command.upgrade(alembic_config(url), "head")

    with old_store.connect() as conn:
        # Every step as it was, byte for byte: state, lease, due time, attempts,
        # version, envelope and the rest.
        assert _raw(conn, "steps") == steps_before
        found = {row.id: step_record(row) for row in conn.execute(select(steps))}
        events_after = _raw(conn, "step_events")
    assert {step.state.value for step in found.values()} == set(STATES)
    assert sum(step.lease_owner is not None for step in found.values()) > STEPS // 20
    assert sum(step.due_at == T2 for step in found.values()) > STEPS // 10
    # Only the events whose envelope their step holds changed: they name it now, and
    # read back (the step's envelope in the name's place) as they were.
    changed = _changed(events_before, events_after)
    assert len(changed) == sum(step.state.value in HELD for step in found.values()) > 0
    for old, detail in changed:
        step = found[old[1]]
        assert detail["envelope"] == {"in_step": True, "commit_state": "not_committed"}
        assert {**detail, "envelope": step.last_envelope} == _document(old[-1])
    # Through the store, on a sample of every state.
    store = StepStore(old_store)
    with old_store.connect() as conn:
        query = select(step_events).where(step_events.c.operation_ref.like("bulk-1__"))
        logged = [event_record(row) for row in conn.execute(query.order_by(step_events.c.id))]
    by_ref: dict[str, list[EventRecord]] = defaultdict(list)
    for event in logged:
        by_ref[event.operation_ref].append(event)
    recorded: dict[str, list[Any]] = defaultdict(list)
    for row in events_before:
        recorded[row[2]].append(_document(row[-1]))  # (id, step_id, operation_ref, ...)
    assert len(by_ref) == 100
    for ref, mine in by_ref.items():
        assert store.events(ref) == with_envelopes(mine, store.get(ref).last_envelope)
        assert [event.detail for event in store.events(ref)] == recorded[ref]

    # A few steps whose envelope a later change replaced (as an operator's resolution
    # does, keeping the replaced one in its event): the downgrade takes them through its
    # Python path, the others through its one statement.
    replaced = _replace_envelopes(old_store, found, STEPS // 2_000)
    expected = {ref: [event.detail for event in store.events(ref)] for ref in replaced}
    assert all(len(details) == 4 for details in expected.values()), expected

    command.downgrade(alembic_config(url), "0006_worker_heartbeats")
    with old_store.connect() as conn:
        after = _raw(conn, "step_events")
    untouched = [row for row in after if row[2] not in replaced]
    assert _changed([row for row in events_before if row[2] not in replaced], untouched) == []
    for ref, details in expected.items():
        assert [_document(row[-1]) for row in after if row[2] == ref] == details, ref
        # The success held the envelope the step had then; the resolution, the new one.
        executed, resolved = details[2], details[3]
        assert executed["envelope"] != resolved["envelope"] == replaced[ref]
        assert "replaced_envelope" not in resolved


def _replace_envelopes(engine: Engine, found: dict[int, Any], count: int) -> dict[str, Any]:
    """Give ``count`` steps holding an adapter's envelope a new one, with the event a
    change replacing it writes (at head): it names the new envelope and keeps the old."""
    chosen = [step for step in found.values() if step.state.value in HELD][:count]
    new = {step.operation_ref: {"ok": True, "code": "RESOLVED", "n": step.id} for step in chosen}
    with engine.begin() as conn:
        for step in chosen:
            envelope = new[step.operation_ref]
            conn.execute(steps.update().where(steps.c.id == step.id).values(last_envelope=envelope))
            detail = {
                "envelope": {"in_step": True, "commit_state": "committed"},
                "replaced_envelope": step.last_envelope,
            }
            conn.execute(
                step_events.insert().values(
                    step_id=step.id, operation_ref=step.operation_ref, at=T2, kind="resolved",
                    from_state=step.state.value, to_state="succeeded", label="resolved",
                    detail=detail,
                )
            )  # fmt: skip
    return new
