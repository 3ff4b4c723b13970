"""Projects: every job and token belongs to one, and a token has a role in it

Existing jobs and tokens move to the project ``default``. Every token could do everything
before, so existing tokens become admins of ``default`` (no one loses what they could do
within it); the bootstrap token is made a server administrator when the server next
starts. Token names that repeat get their id appended, since names are now unique within
a project.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_CONVENTION = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.execute(
        sa.text("INSERT INTO projects (name, created_at) VALUES ('default', CURRENT_TIMESTAMP)")
    )
    op.execute(
        sa.text(
            "UPDATE api_tokens SET name = name || '-' || CAST(id AS VARCHAR(12)) WHERE id NOT IN "
            "(SELECT MIN(id) FROM api_tokens GROUP BY name)"
        )
    )
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("project", sa.String(64), nullable=True))
        batch.add_column(sa.Column("role", sa.String(16), nullable=True))
        batch.add_column(sa.Column("server_admin", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.DateTime(), nullable=True))
    op.execute(sa.text("UPDATE api_tokens SET project = 'default', role = 'admin'"))
    op.execute(sa.text("UPDATE api_tokens SET server_admin = false"))
    with op.batch_alter_table("api_tokens") as batch:
        batch.alter_column("project", existing_type=sa.String(64), nullable=False)
        batch.alter_column("role", existing_type=sa.String(16), nullable=False)
        batch.alter_column("server_admin", existing_type=sa.Boolean(), nullable=False)
        batch.create_foreign_key("fk_api_tokens_project", "projects", ["project"], ["name"])
        batch.create_unique_constraint("uq_api_tokens_project_name", ["project", "name"])
    # Job names were unique on the server; now within a project. The old constraint has
    # no name of its own: PostgreSQL named it, SQLite's batch mode names it by convention.
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("training_jobs_name_key", "training_jobs", type_="unique")
        drop_name = None
    else:
        drop_name = "uq_training_jobs_name"
    with op.batch_alter_table("training_jobs", naming_convention=_CONVENTION) as batch:
        if drop_name:
            batch.drop_constraint(drop_name, type_="unique")
        batch.alter_column("tenant", new_column_name="project", existing_type=sa.String(64))
    op.execute(sa.text("UPDATE training_jobs SET project = 'default'"))
    with op.batch_alter_table("training_jobs") as batch:
        batch.create_unique_constraint("uq_training_jobs_project_name", ["project", "name"])
    op.create_index("ix_training_jobs_project", "training_jobs", ["project"])


def downgrade() -> None:
    op.drop_index("ix_training_jobs_project", table_name="training_jobs")
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_constraint("uq_training_jobs_project_name", type_="unique")
        batch.alter_column("project", new_column_name="tenant", existing_type=sa.String(64))
        batch.create_unique_constraint("training_jobs_name_key", ["name"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint("uq_api_tokens_project_name", type_="unique")
        batch.drop_constraint("fk_api_tokens_project", type_="foreignkey")
        batch.drop_column("last_used_at")
        batch.drop_column("server_admin")
        batch.drop_column("role")
        batch.drop_column("project")
    op.drop_table("projects")
