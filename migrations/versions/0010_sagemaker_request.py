"""Jobs keep the CreateTrainingJob request they were created with over SageMaker's protocol

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("sagemaker_request", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("sagemaker_request")
