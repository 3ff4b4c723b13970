"""The seconds a job's instances worked, apart from the seconds it is billed; when each
instance's script ended, apart from its result

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("worked_seconds", sa.Float(), nullable=True))
    # Until now the billable seconds were the seconds on instances: a live job's earlier
    # attempts keep counting against its max_run.
    op.execute("UPDATE training_jobs SET worked_seconds = billable_seconds")
    with op.batch_alter_table("job_instances") as batch:
        batch.add_column(sa.Column("script_ended_at", sa.DateTime(), nullable=True))
    # Until now the result's time was the script's end.
    op.execute("UPDATE job_instances SET script_ended_at = training_ended_at")


def downgrade() -> None:
    with op.batch_alter_table("job_instances") as batch:
        batch.drop_column("script_ended_at")
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("worked_seconds")
