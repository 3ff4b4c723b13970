"""Why each failed instance failed, as a type beside its reason

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03

Instances that failed before their runtimes named a cause get the one their reason's code
gave (``contract.failure_causes.untyped_cause``, spelled out here: a migration keeps the
values of its day), so a job that restarts on a lost instance still does after the upgrade.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_instances") as batch:
        batch.add_column(sa.Column("failure_cause", sa.String(32), nullable=True))
    op.execute(
        "UPDATE job_instances SET failure_cause = CASE "
        "WHEN failure_reason LIKE 'InstanceLost:%' THEN 'InstanceLost' "
        "WHEN exit_code = 137 THEN 'OutOfMemory' "
        "ELSE 'ScriptError' END "
        "WHERE phase = 'Failed'"
    )


def downgrade() -> None:
    with op.batch_alter_table("job_instances") as batch:
        batch.drop_column("failure_cause")
