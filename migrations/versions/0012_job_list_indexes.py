"""Indexes for the list of jobs, a project's or all, of one status or all, newest first

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_training_jobs_project_created", "training_jobs", ["project", "created_at", "id"]
    )
    op.create_index(
        "ix_training_jobs_project_status_created",
        "training_jobs",
        ["project", "status", "created_at", "id"],
    )
    op.create_index(
        "ix_training_jobs_status_created", "training_jobs", ["status", "created_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_status_created", table_name="training_jobs")
    op.drop_index("ix_training_jobs_project_status_created", table_name="training_jobs")
    op.drop_index("ix_training_jobs_project_created", table_name="training_jobs")
