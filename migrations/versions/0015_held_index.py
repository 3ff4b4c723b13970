"""An index of the jobs holding instances, which every submission reads

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# As service.jobs.models.HELD.
_HELD = sa.text("admitted_at IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_training_jobs_held",
        "training_jobs",
        ["status"],
        postgresql_where=_HELD,
        sqlite_where=_HELD,
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_held", table_name="training_jobs")
