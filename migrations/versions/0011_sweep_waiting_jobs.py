"""Leases note when beat's safety sweep last re-drove a job waiting for capacity

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_leases") as batch:
        batch.add_column(sa.Column("swept_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_leases") as batch:
        batch.drop_column("swept_at")
