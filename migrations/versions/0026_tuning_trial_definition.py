"""The training job definition each tuning trial ran

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05

A tuning job may tune several training job definitions (SageMaker's
TrainingJobDefinitions); each trial names the one it ran. Trials of the tuning jobs stored
before tune one training job, which the column's None stands for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_trials") as batch:
        batch.add_column(sa.Column("definition", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_trials") as batch:
        batch.drop_column("definition")
