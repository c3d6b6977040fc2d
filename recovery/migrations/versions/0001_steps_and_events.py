"""steps and step_events

Revision ID: 0001
Revises:
Create Date: 2026-11-30

The state vocabularies are written out here on purpose: a migration is a snapshot.
``tests/services/recovery/test_migrations.py`` fails when ``StepState`` and this CHECK disagree,
which is the cue to add a migration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = (
    "pending",
    "in_flight",
    "waiting_retry",
    "verifying",
    "needs_input",
    "awaiting_approval",
    "succeeded",
    "failed",
    "escalated",
    "cancelled",
)
COMMIT_STATES = ("not_committed", "committed", "unknown")
WORK_STATES = ("pending", "waiting_retry", "verifying")
LEASED_STATES = ("in_flight", "verifying")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _when() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "steps",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("operation_ref", sa.String(200), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("input", _json(), nullable=False),
        sa.Column("input_hash", sa.String(100), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("commit_state", sa.String(16), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column(
            "verification_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("lookups_unavailable", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("due_at", _when(), nullable=True),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", _when(), nullable=True),
        sa.Column("last_sent_at", _when(), nullable=True),
        sa.Column("last_envelope", _json(), nullable=True),
        sa.Column("fingerprint", sa.String(255), nullable=True),
        sa.Column("fingerprint_repeats", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("flagged_fields", _json(), nullable=False),
        sa.Column("approval_input_hash", sa.String(100), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("published_at", _when(), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("updated_at", _when(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steps")),
        sa.UniqueConstraint("operation_ref", name=op.f("uq_steps_operation_ref")),
        sa.CheckConstraint(_in("state", STATES), name=op.f("ck_steps_state")),
        sa.CheckConstraint(
            f"commit_state IS NULL OR {_in('commit_state', COMMIT_STATES)}",
            name=op.f("ck_steps_commit_state"),
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND attempts <= max_attempts", name=op.f("ck_steps_attempts")
        ),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            op.f("ix_steps_due_work"),
            "steps",
            ["due_at"],
            postgresql_where=sa.text(_in("state", WORK_STATES)),
        )
        op.create_index(
            op.f("ix_steps_leases"),
            "steps",
            ["lease_expires_at"],
            postgresql_where=sa.text(_in("state", LEASED_STATES)),
        )
    else:
        op.create_index(op.f("ix_steps_state_due_at"), "steps", ["state", "due_at"])
        op.create_index(
            op.f("ix_steps_state_lease_expires_at"), "steps", ["state", "lease_expires_at"]
        )

    op.create_table(
        "step_events",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("step_id", _id(), nullable=True),
        sa.Column("operation_ref", sa.String(200), nullable=False),
        sa.Column("at", _when(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("from_state", sa.String(32), nullable=True),
        sa.Column("to_state", sa.String(32), nullable=True),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("detail", _json(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_events")),
        sa.ForeignKeyConstraint(
            ["step_id"], ["steps.id"], name=op.f("fk_step_events_step_id_steps")
        ),
        sa.CheckConstraint(
            f"from_state IS NULL OR {_in('from_state', STATES)}",
            name=op.f("ck_step_events_from_state"),
        ),
        sa.CheckConstraint(
            f"to_state IS NULL OR {_in('to_state', STATES)}", name=op.f("ck_step_events_to_state")
        ),
    )
    op.create_index(op.f("ix_step_events_step_id"), "step_events", ["step_id"])
    op.create_index(op.f("ix_step_events_operation_ref_id"), "step_events", ["operation_ref", "id"])


def downgrade() -> None:
    op.drop_table("step_events")
    op.drop_table("steps")
