"""How far each host's lines have been searched for metrics: extraction now runs after a
batch is stored, no longer while it is

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_cursors",
        sa.Column(
            "job_id",
            sa.String(length=32),
            sa.ForeignKey("training_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("host", sa.String(length=32), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("stopped", sa.String(length=1024), nullable=True),
    )
    # Every line stored until now was searched as it was stored: each host's cursor
    # starts after its last line. Only a live job's lines are searched from here on (an
    # ended one's take no more), so only live jobs need cursors.
    op.execute(
        "INSERT INTO metric_cursors (job_id, host, seq) "
        "SELECT log_events.job_id, log_events.host, max(log_events.seq) FROM log_events "
        "JOIN training_jobs ON training_jobs.id = log_events.job_id "
        "WHERE training_jobs.status NOT IN ('Completed', 'Failed', 'Stopped') "
        "GROUP BY log_events.job_id, log_events.host"
    )


def downgrade() -> None:
    op.drop_table("metric_cursors")
