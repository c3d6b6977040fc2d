"""Migration 0007 on a store of 10^5 steps in every state (built with bulk SQL at 0006,
not through the API), on PostgreSQL and SQLite: every step reads back as it was (state,
lease, due time, attempts, version, envelope), every event reads back as it was, the
events whose envelope their step holds no longer copy it, and the downgrade writes the
copies back. The tables are compared in the database (a copy taken before the upgrade,
``EXCEPT`` both ways), and only the changed events come back to Python."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, bindparam, select, text

from tests.support.recovery.databases import empty_engine
from toolsafe.recovery.db import alembic_config
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
    with empty_engine(request.param, request, tmp_path, "events_0007") as engine:
        json = "CAST({} AS jsonb)" if request.param == "postgresql" else "{}"
        url = engine.url.render_as_string(hide_password=False)
        command.upgrade(alembic_config(url), "0006_worker_heartbeats")
        times = [bindparam(key, when, type_=UTCDateTime()) for key, when in _TIMES.items()]
        with engine.begin() as conn:
            conn.execute(text(_steps_sql(json)).bindparams(*times))
            conn.execute(text(_events_sql(json)).bindparams(times[0]))
        yield engine


_TIMES = {"t0": T0, "t1": T1, "t2": T2}
_JSON = ("input", "last_envelope", "flagged_fields", "detail")
# The events' columns but their detail: the migration may change only the detail.
_EVENT_KEYS = ("id", "step_id", "operation_ref", "at", "kind", "from_state", "to_state", "label")


_TABLES = {"steps": steps, "step_events": step_events}


def _columns(table: str, names: Iterable[str] | None = None) -> str:
    """The columns of ``table`` (all, or ``names``), JSON as text: compared as stored."""
    chosen = [column.name for column in _TABLES[table].columns]
    if names is not None:
        chosen = [name for name in chosen if name in names]
    return ", ".join(f"CAST({name} AS TEXT)" if name in _JSON else name for name in chosen)


def _snapshot(conn: Connection, table: str) -> None:
    """A copy of ``table`` as it is now (``<table>_before``), compared in the database
    instead of reading 10^5 rows into Python."""
    conn.exec_driver_sql(f"CREATE TABLE {table}_before AS SELECT * FROM {table}")  # noqa: S608


def _unequal(
    conn: Connection, table: str, names: Iterable[str] | None = None, where: str = ""
) -> int:
    """Rows of ``table`` and of its snapshot that the other lacks (``names``' columns,
    JSON as text; ``where`` narrows both sides), plus any difference in their counts:
    0 when the two hold the same rows."""
    columns = _columns(table, names)
    now = f"SELECT {columns} FROM {table} {where}"  # noqa: S608 - own names
    then = f"SELECT {columns} FROM {table}_before {where}"  # noqa: S608 - own names
    count = "SELECT count(*) FROM ({}) AS d"
    differing = sum(
        conn.exec_driver_sql(count.format(f"{a} EXCEPT {b}")).scalar_one()
        for a, b in ((now, then), (then, now))
    )
    sizes = [conn.exec_driver_sql(count.format(q)).scalar_one() for q in (now, then)]
    return int(differing + abs(sizes[0] - sizes[1]))


def _changed_details(conn: Connection, where: str = "") -> list[tuple[Any, ...]]:
    """The events whose detail changed since the snapshot (as JSON documents, not only as
    text): (event id, the detail before, the detail now, the step's state and envelope)."""
    query = f"""
SELECT b.id, CAST(b.detail AS TEXT), CAST(e.detail AS TEXT), s.state,
       CAST(s.last_envelope AS TEXT)
FROM step_events_before b JOIN step_events e ON e.id = b.id
LEFT JOIN steps s ON s.id = b.step_id
WHERE CAST(b.detail AS TEXT) <> CAST(e.detail AS TEXT) {where}
ORDER BY b.id"""  # noqa: S608 - own names
    return [
        (row[0], json.loads(row[1]), json.loads(row[2]), row[3], _document(row[4]))
        for row in conn.exec_driver_sql(query)
        if json.loads(row[1]) != json.loads(row[2])
    ]


def _document(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _count(conn: Connection, where: str, **values: Any) -> int:
    query = text(f"SELECT count(*) FROM steps WHERE {where}")  # noqa: S608 - own names
    binds = [bindparam(key, value, type_=UTCDateTime()) for key, value in values.items()]
    return int(conn.execute(query.bindparams(*binds)).scalar_one())


@pytest.mark.timeout(300)
def test_every_step_and_event_reads_back_after_the_migration(old_store: Engine) -> None:
    url = old_store.url.render_as_string(hide_password=False)
    with old_store.begin() as conn:
        _snapshot(conn, "steps")
        _snapshot(conn, "step_events")
        assert _count(conn, "1 = 1") == STEPS
        events = conn.exec_driver_sql("SELECT count(*) FROM step_events").scalar_one()
        assert events > 2 * STEPS
        sample = "WHERE operation_ref LIKE 'bulk-1__' ORDER BY id"
        recorded: dict[str, list[Any]] = defaultdict(list)
        for ref, detail in conn.exec_driver_sql(
            f"SELECT operation_ref, CAST(detail AS TEXT) FROM step_events_before {sample}"  # noqa: S608
        ):
            recorded[ref].append(json.loads(detail))

    command.upgrade(alembic_config(url), "head")

    with old_store.connect() as conn:
        # Every step as it was, byte for byte: state, lease, due time, attempts,
        # version, envelope and the rest; a sample of every state reads back as a record.
        assert _unequal(conn, "steps") == 0
        states = {row[0] for row in conn.exec_driver_sql("SELECT DISTINCT state FROM steps")}
        assert states == set(STATES)
        sampled = select(steps).where(steps.c.id % 97 == 0)  # 97: every state's numbers
        found = [step_record(row) for row in conn.execute(sampled)]
        assert {step.state.value for step in found} == set(STATES)
        assert _count(conn, "lease_owner IS NOT NULL") > STEPS // 20
        assert _count(conn, "due_at = :t2", t2=T2) > STEPS // 10
        held = _count(conn, f"state IN {HELD}")
        # Only the events whose envelope their step holds changed, and only in their
        # detail: they name it now, and read back (the step's envelope in the name's
        # place) as they were.
        assert _unequal(conn, "step_events", _EVENT_KEYS) == 0
        changed = _changed_details(conn)
    assert len(changed) == held > 0
    for _, old, detail, state, envelope in changed:
        assert state in HELD
        assert detail["envelope"] == {"in_step": True, "commit_state": "not_committed"}
        assert {**detail, "envelope": envelope} == old
    # Through the store, on a sample of every state.
    store = StepStore(old_store)
    with old_store.connect() as conn:
        query = select(step_events).where(step_events.c.operation_ref.like("bulk-1__"))
        logged = [event_record(row) for row in conn.execute(query.order_by(step_events.c.id))]
    by_ref: dict[str, list[EventRecord]] = defaultdict(list)
    for event in logged:
        by_ref[event.operation_ref].append(event)
    assert len(by_ref) == 100 and set(by_ref) == set(recorded)
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
    names = ", ".join(f"'{ref}'" for ref in replaced)  # bulk-<n>: no quote in them
    untouched = f"WHERE operation_ref NOT IN ({names})"
    with old_store.connect() as conn:
        # Every other event as it was before the upgrade: the copies written back.
        assert _unequal(conn, "step_events", _EVENT_KEYS, untouched) == 0
        assert _changed_details(conn, f"AND b.operation_ref NOT IN ({names})") == []
        rows = conn.exec_driver_sql(
            "SELECT operation_ref, CAST(detail AS TEXT) FROM step_events "  # noqa: S608
            f"WHERE operation_ref IN ({names}) ORDER BY id"
        ).all()
    after: dict[str, list[Any]] = defaultdict(list)
    for ref, detail in rows:
        after[ref].append(json.loads(detail))
    for ref, details in expected.items():
        assert after[ref] == details, ref
        # The success held the envelope the step had then; the resolution, the new one.
        executed, resolved = details[2], details[3]
        assert executed["envelope"] != resolved["envelope"] == replaced[ref]
        assert "replaced_envelope" not in resolved


def _replace_envelopes(engine: Engine, found: list[Any], count: int) -> dict[str, Any]:
    """Give ``count`` steps holding an adapter's envelope a new one, with the event a
    change replacing it writes (at head): it names the new envelope and keeps the old."""
    chosen = [step for step in found if step.state.value in HELD][:count]
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
