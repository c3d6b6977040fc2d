"""step_events: an event names the envelope its step holds instead of copying it

Revision ID: 0007_events_without_copies
Revises: 0006_worker_heartbeats
Create Date: 2026-12-02

An ``executed`` event whose envelope is the one its step holds keeps only
``{"in_step": true, "commit_state": …}``: the step's ``last_envelope`` is the copy, and a
change that later replaces it keeps the replaced envelope in its own event
(``replaced_envelope``), so every event still reads back as it was recorded
(``toolsafe.recovery.store.shared.with_envelopes``). No column changes; the upgrade
rewrites the events of existing steps whose envelope equals their step's (every one
of them reads back its step's envelope, as no later change kept a replaced one), the
downgrade writes every named envelope back as a copy (one statement for the steps that
kept no replaced envelope, Python for the rest).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007_events_without_copies"
down_revision: str | None = "0006_worker_heartbeats"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IN_STEP = "in_step"
REPLACED = "replaced_envelope"
_BATCH = 2_000

_UPGRADE_POSTGRESQL = f"""
UPDATE step_events AS e
SET detail = jsonb_set(
    e.detail,
    '{{envelope}}',
    jsonb_strip_nulls(
        jsonb_build_object('{IN_STEP}', true, 'commit_state', e.detail->'envelope'->'commit_state')
    )
)
FROM steps AS s
WHERE s.id = e.step_id
  AND s.last_envelope IS NOT NULL
  AND e.detail->'envelope' = s.last_envelope
"""  # noqa: S608 - fixed names only
# SQLite keeps JSON as text: both sides are compared minified (``json``), in the key
# order they were written in (the same serialiser wrote both).
_UPGRADE_SQLITE = f"""
UPDATE step_events
SET detail = json_set(
    detail,
    '$.envelope',
    CASE
        WHEN json_type(detail, '$.envelope.commit_state') = 'text'
        THEN json_object('{IN_STEP}', json('true'), 'commit_state',
                         json_extract(detail, '$.envelope.commit_state'))
        ELSE json_object('{IN_STEP}', json('true'))
    END
)
WHERE step_id IS NOT NULL
  AND json_type(detail, '$.envelope') = 'object'
  AND json(json_extract(detail, '$.envelope')) = (
      SELECT json(steps.last_envelope) FROM steps
      WHERE steps.id = step_events.step_id AND steps.last_envelope IS NOT NULL
  )
"""  # noqa: S608 - fixed names only


def upgrade() -> None:
    bind = op.get_bind()
    op.execute(_UPGRADE_POSTGRESQL if bind.dialect.name == "postgresql" else _UPGRADE_SQLITE)


def _document() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _resolved(details: list[dict[str, Any]], latest: Any) -> list[dict[str, Any] | None]:
    """Each detail with its named envelope filled in and its kept one taken out (None:
    unchanged), read backwards from the step's envelope (as ``with_envelopes``)."""
    held = latest
    found: list[dict[str, Any] | None] = []
    for detail in reversed(details):
        envelope = detail.get("envelope")
        names = isinstance(envelope, Mapping) and envelope.get(IN_STEP) is True
        if not names and REPLACED not in detail:
            found.append(None)
            continue
        shown = dict(detail)
        if names:
            shown["envelope"] = held
        if REPLACED in shown:
            held = shown.pop(REPLACED)
        found.append(shown)
    found.reverse()
    return found


_SET_POSTGRESQL = """
UPDATE step_events AS e SET detail = v.detail
FROM unnest(CAST(:ids AS bigint[]), CAST(:details AS jsonb[])) AS v(id, detail)
WHERE e.id = v.id
"""


def _named(dialect: str) -> str:
    """The steps with an event that names their envelope or keeps a replaced one."""
    if dialect == "postgresql":
        marked = f"detail->'envelope'->'{IN_STEP}' = 'true' OR detail ? '{REPLACED}'"
    else:
        marked = (
            f"json_extract(detail, '$.envelope.{IN_STEP}') = 1 "
            f"OR json_type(detail, '$.{REPLACED}') IS NOT NULL"
        )
    where = f"step_id IS NOT NULL AND ({marked})"
    return f"SELECT DISTINCT step_id FROM step_events WHERE {where}"  # noqa: S608 - fixed names


# The downgrade's common case in one statement: a step none of whose events keeps a
# replaced envelope gets its envelope back in every event that names it (as
# ``with_envelopes`` reads them). The steps left (a replaced envelope kept, or no
# envelope held) go through ``_resolved`` in Python, batch by batch.
_DOWNGRADE_POSTGRESQL = f"""
UPDATE step_events AS e
SET detail = jsonb_set(e.detail, '{{envelope}}', s.last_envelope)
FROM steps AS s
WHERE s.id = e.step_id
  AND s.last_envelope IS NOT NULL
  AND e.detail->'envelope'->'{IN_STEP}' = 'true'
  AND NOT EXISTS (
      SELECT 1 FROM step_events AS r WHERE r.step_id = e.step_id AND r.detail ? '{REPLACED}'
  )
"""  # noqa: S608 - fixed names only
_DOWNGRADE_SQLITE = f"""
UPDATE step_events
SET detail = json_set(
    detail,
    '$.envelope',
    json((SELECT steps.last_envelope FROM steps WHERE steps.id = step_events.step_id))
)
WHERE step_id IS NOT NULL
  AND json_extract(detail, '$.envelope.{IN_STEP}') = 1
  AND (SELECT steps.last_envelope FROM steps WHERE steps.id = step_events.step_id) IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM step_events AS r
      WHERE r.step_id = step_events.step_id AND json_type(r.detail, '$.{REPLACED}') IS NOT NULL
  )
"""  # noqa: S608 - fixed names only


def downgrade() -> None:
    bind = op.get_bind()
    op.execute(_DOWNGRADE_POSTGRESQL if bind.dialect.name == "postgresql" else _DOWNGRADE_SQLITE)
    steps = sa.table(
        "steps", sa.column("id", sa.BigInteger()), sa.column("last_envelope", _document())
    )
    events = sa.table(
        "step_events",
        sa.column("id", sa.BigInteger()),
        sa.column("step_id", sa.BigInteger()),
        sa.column("detail", _document()),
    )
    named = sorted(row[0] for row in bind.exec_driver_sql(_named(bind.dialect.name)))
    for start in range(0, len(named), _BATCH):
        ids = named[start : start + _BATCH]
        query = sa.select(steps.c.id, steps.c.last_envelope).where(steps.c.id.in_(ids))
        latest = {step_id: envelope for step_id, envelope in bind.execute(query)}
        by_step: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        mine = (
            sa.select(events.c.id, events.c.step_id, events.c.detail)
            .where(events.c.step_id.in_(ids))
            .order_by(events.c.id)
        )
        for event_id, step_id, detail in bind.execute(mine):
            by_step.setdefault(step_id, []).append((event_id, dict(detail)))
        changed: list[dict[str, Any]] = []
        for step_id, found in by_step.items():
            resolved = _resolved([detail for _id, detail in found], latest.get(step_id))
            changed.extend(
                {"event_id": event_id, "new_detail": detail}
                for (event_id, _old), detail in zip(found, resolved, strict=True)
                if detail is not None
            )
        if changed and bind.dialect.name == "postgresql":
            # One statement per batch: an executemany of UPDATEs is a round trip each.
            bind.execute(
                sa.text(_SET_POSTGRESQL),
                {
                    "ids": [row["event_id"] for row in changed],
                    "details": [json.dumps(row["new_detail"]) for row in changed],
                },
            )
        elif changed:
            bind.execute(
                sa.update(events)
                .where(events.c.id == sa.bindparam("event_id"))
                .values(detail=sa.bindparam("new_detail", type_=_document())),
                changed,
            )
