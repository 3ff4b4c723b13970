"""An index of a project's jobs by when they last changed, the order SageMaker's Search
answers in unless told otherwise

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_training_jobs_project_modified", "training_jobs", ["project", "updated_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_project_modified", table_name="training_jobs")
