"""Hyperparameter tuning jobs and their trials

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tuning_jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("strategy", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("failure_reason", sa.String(1024), nullable=True),
        sa.Column("sagemaker_request", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("trials_asked", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project", "name", name="uq_tuning_jobs_project_name"),
    )
    op.create_index(
        "ix_tuning_jobs_project_created", "tuning_jobs", ["project", "created_at", "id"]
    )
    op.create_index("ix_tuning_jobs_status", "tuning_jobs", ["status"])
    op.create_table(
        "tuning_trials",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("tuning_job_id", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("strategy_notes", sa.JSON(), nullable=False),
        sa.Column("training_job_id", sa.String(32), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("objective", sa.Float(), nullable=True),
        sa.Column("objective_status", sa.String(16), nullable=False),
        sa.Column("failure_reason", sa.String(1024), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["tuning_job_id"], ["tuning_jobs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["training_job_id"], ["training_jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tuning_job_id", "number", name="uq_tuning_trials_number"),
    )
    op.create_index("ix_tuning_trials_training_job_id", "tuning_trials", ["training_job_id"])


def downgrade() -> None:
    op.drop_index("ix_tuning_trials_training_job_id", table_name="tuning_trials")
    op.drop_table("tuning_trials")
    op.drop_index("ix_tuning_jobs_status", table_name="tuning_jobs")
    op.drop_index("ix_tuning_jobs_project_created", table_name="tuning_jobs")
    op.drop_table("tuning_jobs")
