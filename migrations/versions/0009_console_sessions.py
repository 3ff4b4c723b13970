"""Console sessions: a browser's session stands until it is signed out or expires

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "token_id",
            sa.Integer(),
            sa.ForeignKey("api_tokens.id", name="fk_console_sessions_token"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_console_sessions_token_id", "console_sessions", ["token_id"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_token_id", table_name="console_sessions")
    op.drop_table("console_sessions")
