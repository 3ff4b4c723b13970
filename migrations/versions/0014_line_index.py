"""A job's priority in a column of its own, and an index of the line for capacity

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# As service.jobs.models.IN_LINE.
_IN_LINE = sa.text("status = 'InProgress' AND restart_cause IS NULL AND admitted_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(
            sa.Column("priority", sa.Integer(), nullable=False, server_default="0")
        )
    jobs = sa.table("training_jobs", sa.column("spec", sa.JSON), sa.column("priority"))
    given = jobs.c.spec["priority"].as_integer()
    op.execute(jobs.update().where(given.is_not(None), given != 0).values(priority=given))
    op.create_index(
        "ix_training_jobs_line",
        "training_jobs",
        [sa.text("priority DESC"), "created_at", "id"],
        postgresql_where=_IN_LINE,
        sqlite_where=_IN_LINE,
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_line", table_name="training_jobs")
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("priority")
