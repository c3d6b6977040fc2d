"""the release timer's index: waiting steps by due time

Revision ID: 0005_parked_delays
Revises: 0004_status_page
Create Date: 2026-12-01

A delay longer than ``TOOLSAFE_MAX_ETA`` is parked in the store (the step waits in
``waiting_retry`` or ``verifying``) and the release timer in the sweeper's process
publishes its hint a lookahead before it falls due (``release_parked``). This partial
index holds only waiting steps, so that query reads one short index range however many
steps are pending or done. SQLite reads ``ix_steps_state_due_at`` for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_parked_delays"
down_revision: str | None = "0004_status_page"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            "ix_steps_parked",
            "steps",
            ["due_at"],
            postgresql_where=sa.text("state IN ('waiting_retry', 'verifying')"),
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_steps_parked", table_name="steps")
