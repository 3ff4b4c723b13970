"""A job's stage, stored: what was derived from its status and nullable columns is kept by
the lifecycle (service.jobs.lifecycle), which moves it with each event

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# Each job's stage as it was derived, in the order the derivation asked.
_DERIVED = sa.text(
    """
    UPDATE training_jobs SET stage = CASE
        WHEN status IN ('Completed', 'Failed', 'Stopped') THEN 'Ended'
        WHEN status = 'Stopping' THEN 'Stopping'
        WHEN restart_cause IS NOT NULL THEN 'Restarting'
        WHEN admitted_at IS NULL THEN 'Queued'
        WHEN launched_at IS NULL THEN 'Launching'
        ELSE 'Running'
    END
    """
)
# The line, as service.jobs.models.IN_LINE words it now, and as it was.
_IN_LINE = sa.text("stage = 'Queued'")
_WAS_IN_LINE = sa.text("status = 'InProgress' AND restart_cause IS NULL AND admitted_at IS NULL")
_LINE_ORDER = [sa.text("priority DESC"), "created_at", "id"]


def upgrade() -> None:
    # Added with a default, not altered afterwards: on SQLite an altered column means a
    # copied table, and dropping the old one would cascade to every job's lines and points.
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(
            sa.Column("stage", sa.String(16), nullable=False, server_default="Queued")
        )
    op.execute(_DERIVED)
    _line_index(_IN_LINE)


def downgrade() -> None:
    _line_index(_WAS_IN_LINE)
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("stage")


def _line_index(where: sa.TextClause) -> None:
    op.drop_index("ix_training_jobs_line", table_name="training_jobs")
    op.create_index(
        "ix_training_jobs_line",
        "training_jobs",
        _LINE_ORDER,
        postgresql_where=where,
        sqlite_where=where,
    )
