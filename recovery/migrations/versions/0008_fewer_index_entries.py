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


_STATUS_PAGE = ("ix_steps_state_id", "ix_steps_tool_state_id", "ix_steps_state_operation_ref")
_NEW = "_0008"  # the replacements' names while they are built


def _status_page_indexes(where: str | None) -> None:
    """The status page's three indexes (``where``: their predicate), built under
    temporary names beside the old ones, then put in their place.

    Building first holds only a SHARE lock on ``steps`` (reads go on, writes wait, as
    for any CREATE INDEX); the ACCESS EXCLUSIVE lock of the drops and renames, which
    stops reads too, is taken at the end and held only until the commit.
    """
    predicate = None if where is None else sa.text(where)
    op.create_index(
        "ix_steps_state_id" + _NEW, "steps", ["state", "id"], postgresql_where=predicate
    )
    op.create_index(
        "ix_steps_tool_state_id" + _NEW,
        "steps",
        ["tool", "state", "id"],
        postgresql_where=predicate,
    )
    op.create_index(
        "ix_steps_state_operation_ref" + _NEW,
        "steps",
        ["state", "operation_ref"],
        postgresql_ops={"operation_ref": "varchar_pattern_ops"},
        postgresql_where=predicate,
    )
    for name in _STATUS_PAGE:
        op.drop_index(name, table_name="steps")
        op.execute(f"ALTER INDEX {name}{_NEW} RENAME TO {name}")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index("ix_steps_in_flight", "steps", ["id"], postgresql_where=sa.text(IN_FLIGHT))
    _status_page_indexes(LISTED)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _status_page_indexes(None)
    op.drop_index("ix_steps_in_flight", table_name="steps")
