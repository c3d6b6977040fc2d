"""A batch submission's statements: many pending steps and their ``submitted`` events
inside one transaction the caller owns (R2, R10).

On PostgreSQL the whole batch is ONE statement (the calls as arrays, ``unnest``ed, the
steps inserted ``ON CONFLICT DO NOTHING`` and each new one's event appended in the
same statement), plus one read of the operation_refs that existed; elsewhere it is
``insert_step`` call by call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import BigInteger, Connection, TextualSelect, bindparam, select, text

from toolsafe.recovery.records import EventRecord, NewStep, StepRecord, step_record
from toolsafe.recovery.rows import json_ready
from toolsafe.recovery.schema import steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import SUBMITTED, submitted_change
from toolsafe.recovery.store.sql.ops import insert_step

Inserted = tuple[StepRecord, EventRecord | None]

_COLUMNS: Final = (
    "operation_ref, tool, input, input_hash, state, commit_state, attempts, max_attempts, "
    "verification_attempts, lookups_unavailable, due_at, flagged_fields, fingerprint_repeats, "
    "published_at, version, created_at, updated_at"
)
# ``firsts``: a ref given twice in one batch is inserted (and logged) once, by its first
# call; the later ones are repeats of it.
# Fixed names only in the f-string; every value is a bind parameter.
_SQL: Final = f"""
WITH batch AS (
    SELECT * FROM unnest(
        CAST(:refs AS varchar[]), CAST(:tools AS varchar[]), CAST(:inputs AS jsonb[]),
        CAST(:hashes AS varchar[]), CAST(:max_attempts AS integer[]),
        CAST(:details AS jsonb[]), CAST(:ords AS integer[])
    ) AS b(operation_ref, tool, input, input_hash, max_attempts, detail, ord)
),
firsts AS (
    SELECT DISTINCT ON (operation_ref) * FROM batch ORDER BY operation_ref, ord
),
moved AS (
    INSERT INTO steps ({_COLUMNS})
    SELECT operation_ref, tool, input, input_hash, 'pending', NULL, 0, max_attempts, 0, 0,
           :now, CAST('[]' AS jsonb), 0, :published_at, 1, :now, :now
    FROM firsts ORDER BY ord
    ON CONFLICT (operation_ref) DO NOTHING
    RETURNING *
),
logged AS (
    INSERT INTO step_events (step_id, operation_ref, at, kind, from_state, to_state, label,
                             detail)
    SELECT moved.id, moved.operation_ref, :now, '{SUBMITTED}', NULL, moved.state,
           '{SUBMITTED}', firsts.detail
    FROM moved JOIN firsts ON firsts.operation_ref = moved.operation_ref
    ORDER BY moved.id
    RETURNING id, step_id
)
SELECT moved.*, logged.id AS event_id FROM moved JOIN logged ON logged.step_id = moved.id
"""  # noqa: S608
_TIME = steps.c.created_at.type
_BATCH: Final[TextualSelect] = (
    text(_SQL)
    .bindparams(bindparam("now", type_=_TIME), bindparam("published_at", type_=_TIME))
    .columns(*steps.c, event_id=BigInteger())
)
_EXISTING: Final = select(steps).where(steps.c.operation_ref.in_(bindparam("refs", expanding=True)))


def insert_steps(
    conn: Connection,
    calls: Sequence[tuple[NewStep, str, str]],
    *,
    now: datetime,
    published_at: datetime | None,
    actor: str | None,
) -> list[Inserted]:
    """Each call (with its checked operation_ref and hash) as ``insert_step`` would do
    it, in order: (the step, its event) for a new step, (the stored step, None) for a
    ref that existed before or was made by an earlier call of the batch."""
    if conn.dialect.name != "postgresql":
        return [
            insert_step(
                conn,
                tool=call.tool,
                input=call.input,
                input_hash=digest,
                operation_ref=ref,
                max_attempts=call.policy.retry.max_attempts,
                now=now,
                published_at=published_at,
                actor=actor,
            )
            for call, ref, digest in calls
        ]
    changes = [
        submitted_change(call.tool, digest, call.policy.retry.max_attempts, actor)
        for call, _ref, digest in calls
    ]
    parameters = {
        "refs": [ref for _call, ref, _digest in calls],
        "tools": [call.tool for call, _ref, _digest in calls],
        "inputs": [json.dumps(dict(call.input)) for call, _ref, _digest in calls],
        "hashes": [digest for _call, _ref, digest in calls],
        "max_attempts": [call.policy.retry.max_attempts for call, _ref, _digest in calls],
        "details": [json.dumps(json_ready(change.detail)) for change in changes],
        "ords": list(range(len(calls))),
        "now": now,
        "published_at": published_at,
    }
    made = {row.operation_ref: row for row in conn.execute(_BATCH, parameters)}
    missing = sorted({ref for _call, ref, _digest in calls} - made.keys())
    found = {}
    if missing:
        found = {row.operation_ref: row for row in conn.execute(_EXISTING, {"refs": missing})}
    inserted: list[Inserted] = []
    logged: set[str] = set()
    for (_call, ref, _digest), change in zip(calls, changes, strict=True):
        row = made.get(ref)
        if row is None or ref in logged:
            existing = row if row is not None else found.get(ref)
            if existing is None:  # pragma: no cover - a conflicting row cannot vanish
                raise RuntimeError(f"operation_ref {ref!r} conflicted but is not there")
            inserted.append((step_record(existing), None))
            continue
        logged.add(ref)
        event = EventRecord(
            id=int(row.event_id),
            operation_ref=ref,
            at=now.astimezone(UTC),
            kind=change.kind,
            from_state=None,
            to_state=StepState.PENDING,
            label=change.label,
            detail=json_ready(change.detail),
        )
        inserted.append((step_record(row), event))
    return inserted
