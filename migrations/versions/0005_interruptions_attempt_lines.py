"""Spot interruptions counted apart from lost instances; where an attempt's lines begin

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(
            sa.Column("interruptions", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("attempt_first_log_seq", sa.Integer(), nullable=False, server_default="1")
        )
    with op.batch_alter_table("training_jobs") as batch:
        # The defaults were for existing rows; new rows get theirs from the models.
        batch.alter_column("interruptions", server_default=None)
        batch.alter_column("attempt_first_log_seq", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("attempt_first_log_seq")
        batch.drop_column("interruptions")
