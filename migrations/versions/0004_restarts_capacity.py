"""Restarts, spot interruptions, capacity admission, pending reasons and progress

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = [
    sa.Column("spot_savings_percent", sa.Float(), nullable=True),
    sa.Column("tenant", sa.String(length=64), nullable=False, server_default=""),
    sa.Column("admitted_at", sa.DateTime(), nullable=True),
    sa.Column("pending_reason", sa.Text(), nullable=True),
    sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("infrastructure_restarts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("restart_cause", sa.Text(), nullable=True),
    sa.Column("interruption_noticed_at", sa.DateTime(), nullable=True),
    sa.Column("interruption_message", sa.Text(), nullable=True),
    sa.Column("progress_first", sa.Float(), nullable=True),
    sa.Column("progress_first_at", sa.DateTime(), nullable=True),
    sa.Column("progress", sa.Float(), nullable=True),
    sa.Column("progress_at", sa.DateTime(), nullable=True),
]


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        for column in _COLUMNS:
            batch.add_column(column)
    # Jobs that ran before this revision held their instances from launch.
    op.execute("UPDATE training_jobs SET admitted_at = launched_at")
    with op.batch_alter_table("training_jobs") as batch:
        # The defaults were for existing rows; new rows get theirs from the models.
        for name in ("tenant", "attempt", "restarts", "infrastructure_restarts"):
            batch.alter_column(name, server_default=None)
    op.create_index("ix_training_jobs_admitted", "training_jobs", ["status", "admitted_at"])


def downgrade() -> None:
    op.drop_index("ix_training_jobs_admitted", table_name="training_jobs")
    with op.batch_alter_table("training_jobs") as batch:
        for column in reversed(_COLUMNS):
            batch.drop_column(column.name)
