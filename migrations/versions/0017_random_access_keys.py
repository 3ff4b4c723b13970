"""A token's AWS access key id is random, stored beside it; tokens made before keep the
id derived from their row's number

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("access_key_id", sa.String(20), nullable=True))
    op.create_index("ix_api_tokens_access_key_id", "api_tokens", ["access_key_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_api_tokens_access_key_id", table_name="api_tokens")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("access_key_id")
