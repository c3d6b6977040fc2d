"""workers: the heartbeats of live workers

Revision ID: 0006_worker_heartbeats
Revises: 0005_parked_delays
Create Date: 2026-12-01

Each ``toolsafe worker`` keeps one row here, renewed every heartbeat interval and removed
at a warm shutdown; the gateway reads it to say when no worker is consuming (a ``?wait``
answers at once with the ``no_worker`` hint) and the status page shows it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_worker_heartbeats"
down_revision: str | None = "0005_parked_delays"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.String(400), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_workers")),
    )


def downgrade() -> None:
    op.drop_table("workers")
