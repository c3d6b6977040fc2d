"""Migration 0008 on a store of 10^3 steps in every state (built with bulk SQL at 0007),
on PostgreSQL and SQLite: the rows stay as they were, the status page answers every
filter as before, and the indexes are the ones each revision declares: on PostgreSQL the
status page's three leave ``in_flight`` out and ``ix_steps_in_flight`` holds it; SQLite's
do not change. Then the downgrade, checked the same way."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, bindparam, text

from tests.support.recovery.databases import empty_engine
from toolsafe.recovery.db import alembic_config
from toolsafe.recovery.schema import UTCDateTime
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.overview import SPARSE, Count, StepFilter
from toolsafe.recovery.store.sql.overview import Overview

STEPS = 1_000
STATES = [state.value for state in StepState]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_STATE = f"CASE i % {len(STATES)} " + " ".join(
    f"WHEN {index} THEN '{state}'" for index, state in enumerate(STATES)
)
_STEPS_SQL = f"""
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {STEPS}),
numbered AS (SELECT i, {_STATE} END AS state FROM g)
INSERT INTO steps (operation_ref, tool, input, input_hash, state, attempts, max_attempts,
    verification_attempts, lookups_unavailable, due_at, lease_owner, lease_expires_at,
    fingerprint_repeats, flagged_fields, version, created_at, updated_at)
SELECT 'run_' || CAST(i % 3 AS TEXT) || '/step_' || CAST(i AS TEXT),
    CASE WHEN i % 4 = 0 THEN 'send_email' ELSE 'create_invoice' END,
    {{json}}, 'hash-' || CAST(i AS TEXT), state,
    CASE WHEN state = 'pending' THEN 0 ELSE 1 END, 3, 0, 0,
    CASE WHEN state IN ('pending', 'waiting_retry', 'verifying') THEN :t0 ELSE NULL END,
    CASE WHEN state = 'in_flight' THEN 'host:1:worker' ELSE NULL END,
    CASE WHEN state = 'in_flight' THEN :t0 ELSE NULL END,
    0, {{empty}}, 1 + i % 5, :t0, :t0
FROM numbered
"""  # noqa: S608
_EVENTS_SQL = """
INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label, detail)
SELECT id, operation_ref, :t0, 'submitted', NULL, 'pending', 'submitted', {detail} FROM steps
"""
_FILTERS = [
    StepFilter(),
    StepFilter(tool="send_email"),
    StepFilter(prefix="run_1/"),
    StepFilter(tool="create_invoice", prefix="run_2/step_1"),
]


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def store_at_0007(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A database at 0007 holding 10^3 steps spread over every state, with events."""
    with empty_engine(request.param, request, tmp_path, "ix_0008") as engine:
        json = "CAST({} AS jsonb)" if request.param == "postgresql" else "{}"
        url = engine.url.render_as_string(hide_password=False)
        command.upgrade(alembic_config(url), "0007_events_without_copies")
        t0 = bindparam("t0", T0, type_=UTCDateTime())
        steps_sql = _STEPS_SQL.format(
            json=json.format("""'{"n": ' || CAST(i AS TEXT) || '}'"""), empty=json.format("'[]'")
        )
        with engine.begin() as conn:
            conn.execute(text(steps_sql).bindparams(t0))
            events = _EVENTS_SQL.format(detail=json.format("""'{"tool": "create_invoice"}'"""))
            conn.execute(text(events).bindparams(t0))
        yield engine


def _rows(conn: Connection) -> list[Any]:
    return [
        tuple(row)
        for table in ("steps", "step_events")
        for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY id"))  # noqa: S608
    ]


def _indexes(conn: Connection) -> dict[str, str]:
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'steps'")
        ).all()
    else:
        rows = conn.execute(
            text("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'steps'")
        ).all()
    return {str(name): str(definition) for name, definition in rows}


def _answers(engine: Engine) -> tuple[list[Any], list[Any]]:
    """What the status page reads for each filter: every state's count; each state's
    newest steps (and all states'), a page from the start and one from half-way, read
    as a sparse state is and as a dense one is."""
    overview = Overview(engine)
    counted: list[Any] = []
    pages: list[Any] = []
    dense = dict.fromkeys(StepState, Count(SPARSE + 1, True))
    for where in _FILTERS:
        counts = overview.counts(where)
        counted.append(sorted(counts.items()))
        for sizes in (counts, dense):
            for states in [frozenset({state}) for state in StepState] + [None]:
                chosen = StepFilter(where.tool, where.prefix, states)
                for before in (None, STEPS // 2):
                    page, cursor = overview.page(chosen, before=before, limit=7, sizes=sizes)
                    pages.append(([step.id for step in page], cursor))
    return counted, pages


def test_0008_up_and_down_keeps_the_rows_and_the_status_page(store_at_0007: Engine) -> None:
    engine = store_at_0007
    url = engine.url.render_as_string(hide_password=False)
    postgresql = engine.dialect.name == "postgresql"
    status_page = ("ix_steps_state_id", "ix_steps_tool_state_id") + (
        ("ix_steps_state_operation_ref",) if postgresql else ()
    )
    with engine.connect() as conn:
        rows, old_indexes = _rows(conn), _indexes(conn)
    answers = _answers(engine)
    assert set(status_page) <= set(old_indexes)
    assert not any(" WHERE " in old_indexes[name] for name in status_page)
    counted, pages = answers
    assert all(count.value > 0 for counts in counted[:1] for _state, count in counts)
    assert sum(len(page) for page, _cursor in pages) > 0

    command.upgrade(alembic_config(url), "0008_fewer_index_entries")
    with engine.connect() as conn:
        assert _rows(conn) == rows
        new_indexes = _indexes(conn)
    assert _answers(engine) == answers
    if postgresql:
        for name in status_page:
            assert new_indexes[name].endswith("WHERE ((state)::text <> 'in_flight'::text)")
            assert new_indexes[name].split(" WHERE ")[0] == old_indexes[name]
        assert new_indexes["ix_steps_in_flight"] == (
            "CREATE INDEX ix_steps_in_flight ON public.steps USING btree (id) "
            "WHERE ((state)::text = 'in_flight'::text)"
        )
        assert set(new_indexes) == set(old_indexes) | {"ix_steps_in_flight"}
    else:
        assert new_indexes == old_indexes

    command.downgrade(alembic_config(url), "0007_events_without_copies")
    with engine.connect() as conn:
        assert _rows(conn) == rows
        assert _indexes(conn) == old_indexes
    assert _answers(engine) == answers
