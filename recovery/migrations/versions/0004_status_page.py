"""indexes of the status page: a state's newest steps, overall and by tool

Revision ID: 0004_status_page
Revises: 0003_gateway_keys
Create Date: 2026-12-01

The status page (``/ui/``) lists the newest steps of a state and counts each state up
to a cap, by tool and by operation_ref prefix; with these indexes each reads one index
range, so they cost the same with 10^6 steps in the table as with 10^4
(docs/status-page.md has the measurement).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004_status_page"
down_revision: str | None = "0003_gateway_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_steps_state_id", "steps", ["state", "id"])
    op.create_index("ix_steps_tool_state_id", "steps", ["tool", "state", "id"])
    if op.get_bind().dialect.name == "postgresql":
        # The ref-prefix filter: a state's LIKE 'prefix%' range under any collation.
        op.create_index(
            "ix_steps_state_operation_ref",
            "steps",
            ["state", "operation_ref"],
            postgresql_ops={"operation_ref": "varchar_pattern_ops"},
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_steps_state_operation_ref", table_name="steps")
    op.drop_index("ix_steps_tool_state_id", table_name="steps")
    op.drop_index("ix_steps_state_id", table_name="steps")
