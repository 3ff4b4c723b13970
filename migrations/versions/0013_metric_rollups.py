"""Per-minute rollups of metric points, for charts of long jobs

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column(
            "job_id",
            sa.String(32),
            sa.ForeignKey("training_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(32), primary_key=True),
        sa.Column("minute", sa.DateTime(), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=False),
        sa.Column("high", sa.Float(), nullable=False),
    )
    # The points stored before this revision, summed up as ingest now sums new ones. On
    # SQLite the minute is written as SQLAlchemy writes a DateTime there.
    if op.get_bind().dialect.name == "postgresql":
        minute = "date_trunc('minute', time)"
    else:
        minute = "strftime('%Y-%m-%d %H:%M:00.000000', time)"
    columns = f"job_id, name, host, {minute}"
    # Built from the constants above only.
    op.execute(
        "INSERT INTO metric_rollups (job_id, name, host, minute, count, total, low, high) "  # noqa: S608
        f"SELECT {columns}, count(*), sum(value), min(value), max(value) "
        f"FROM metric_points GROUP BY {columns}"
    )


def downgrade() -> None:
    op.drop_table("metric_rollups")
