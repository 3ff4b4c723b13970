"""When each instance first reported Training and Uploading: a job's secondary-status
history records every phase its instances went through, however late a pass sees them

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_instances") as batch:
        batch.add_column(sa.Column("training_reported_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("uploading_reported_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_instances") as batch:
        batch.drop_column("uploading_reported_at")
        batch.drop_column("training_reported_at")
