"""Log lines keep the indexes their reads use: (job_id, id) is read by nothing, and every
line stored paid for it

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_log_events_job_id", table_name="log_events")


def downgrade() -> None:
    op.create_index("ix_log_events_job_id", "log_events", ["job_id", "id"])
