"""escalation_outbox: notices owed to the escalation handlers, delivered at least once

Revision ID: 0002_escalation_outbox
Revises: 0001
Create Date: 2026-12-01

A snapshot like 0001: the outcome vocabulary is written out here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_escalation_outbox"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OUTCOMES = ("delivered", "step_moved_on")


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _when() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    outcomes = ", ".join(repr(value) for value in OUTCOMES)
    op.create_table(
        "escalation_outbox",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("step_id", _id(), nullable=False),
        sa.Column("operation_ref", sa.String(200), nullable=False),
        sa.Column("dedup_key", sa.String(255), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("sends", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("last_sent_at", _when(), nullable=False),
        sa.Column("acknowledged_at", _when(), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_escalation_outbox")),
        sa.UniqueConstraint("dedup_key", name=op.f("uq_escalation_outbox_dedup_key")),
        sa.ForeignKeyConstraint(
            ["step_id"],
            ["steps.id"],
            name=op.f("fk_escalation_outbox_step_id_steps"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            f"outcome IS NULL OR outcome IN ({outcomes})", name=op.f("ck_escalation_outbox_outcome")
        ),
    )
    op.create_index(op.f("ix_escalation_outbox_step_id"), "escalation_outbox", ["step_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            op.f("ix_escalation_outbox_open"),
            "escalation_outbox",
            ["last_sent_at"],
            postgresql_where=sa.text("acknowledged_at IS NULL"),
        )
    else:
        op.create_index(
            op.f("ix_escalation_outbox_acknowledged_at_last_sent_at"),
            "escalation_outbox",
            ["acknowledged_at", "last_sent_at"],
        )


def downgrade() -> None:
    op.drop_table("escalation_outbox")
