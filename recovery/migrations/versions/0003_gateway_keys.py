"""api_keys, and the step-change notification of the push path

Revision ID: 0003_gateway_keys
Revises: 0002_escalation_outbox
Create Date: 2026-12-01

The gateway's keys (only a salted scrypt hash of each secret) and, on PostgreSQL, a
trigger that sends ``NOTIFY toolsafe_steps, '<operation_ref>'`` for every event row: in
the transaction of the state change, so a waiter hears of it at the commit, never before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_gateway_keys"
down_revision: str | None = "0002_escalation_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION toolsafe_notify_step() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('toolsafe_steps', NEW.operation_ref);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
NOTIFY_TRIGGER = (
    "CREATE TRIGGER toolsafe_notify_step AFTER INSERT ON step_events "
    "FOR EACH ROW EXECUTE FUNCTION toolsafe_notify_step()"
)


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=True),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("secret_hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_id", name=op.f("uq_api_keys_key_id")),
        sa.UniqueConstraint("name", name=op.f("uq_api_keys_name")),
        sa.CheckConstraint("scope IN ('agent', 'operator')", name=op.f("ck_api_keys_scope")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(NOTIFY_FUNCTION)
        op.execute(NOTIFY_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS toolsafe_notify_step ON step_events")
        op.execute("DROP FUNCTION IF EXISTS toolsafe_notify_step()")
    op.drop_table("api_keys")
