"""steps: the status page's indexes leave in_flight out on PostgreSQL

Revision ID: 0008_fewer_index_entries
Revises: 0007_events_without_copies
Create Date: 2026-12-03

A change of state is never a HOT update (``state`` is in every index's key or
predicate), so each claim and each record adds an entry to every index of ``steps``.
On PostgreSQL the status page's three indexes (``0004_status_page``) become partial,
``WHERE state <> 'in_flight'``, and the steps in flight (as many as run at once) get a
small index of their own, ``ix_steps_in_flight (id) WHERE state = 'in_flight'``: a claim
writes one index entry there instead of three (docs/benchmarks.md, "fewer index entries
per step"). SQLite keeps its indexes as they are (its planner does not match a query's
``state = 'x'`` to a ``state <> 'in_flight'`` predicate): the revision changes nothing
there. No data changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_fewer_index_entries"
down_revision: str | None = "0007_events_without_copies"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literals, as in the models (toolsafe.recovery.schema): the migration must not change
# when the code's vocabulary does.
LISTED = "state <> 'in_flight'"
IN_FLIGHT = "state = 'in_flight'"


def _status_page_indexes(where: str | None) -> None:
    predicate = None if where is None else sa.text(where)
    op.create_index("ix_steps_state_id", "steps", ["state", "id"], postgresql_where=predicate)
    op.create_index(
        "ix_steps_tool_state_id", "steps", ["tool", "state", "id"], postgresql_where=predicate
    )
    op.create_index(
        "ix_steps_state_operation_ref",
        "steps",
        ["state", "operation_ref"],
        postgresql_ops={"operation_ref": "varchar_pattern_ops"},
        postgresql_where=predicate,
    )


def _drop_status_page_indexes() -> None:
    for name in ("ix_steps_state_operation_ref", "ix_steps_tool_state_id", "ix_steps_state_id"):
        op.drop_index(name, table_name="steps")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index("ix_steps_in_flight", "steps", ["id"], postgresql_where=sa.text(IN_FLIGHT))
    _drop_status_page_indexes()
    _status_page_indexes(LISTED)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _drop_status_page_indexes()
    _status_page_indexes(None)
    op.drop_index("ix_steps_in_flight", table_name="steps")
