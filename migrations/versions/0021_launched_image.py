"""The image a job's instances run, as they were launched, and why it is not the one its
fields named

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("launched_image", sa.String(255), nullable=True))
        batch.add_column(sa.Column("launched_image_note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("launched_image_note")
        batch.drop_column("launched_image")
