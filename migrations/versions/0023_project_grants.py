"""The places granted to each project, and the places each job writes

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02

Every job already stored gets its places: its output folder (``<output_path>/<name>``)
and its checkpoint URI, by their keys as written (``service.grants.places.keys``, without
resolving links: a migration reads the database, not the jobs' disks).
"""

from __future__ import annotations

import os
import posixpath
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_KEY = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_BATCH = 1000


def upgrade() -> None:
    op.create_table(
        "project_grants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(1024), nullable=False),
        sa.Column("access", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project"], ["projects.name"], name="fk_project_grants_project"
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project", "prefix", name="uq_project_grants_project_prefix"),
    )
    op.create_index("ix_project_grants_project", "project_grants", ["project"])
    places = op.create_table(
        "job_write_places",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("key", _KEY, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["training_jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_write_places_job_id", "job_write_places", ["job_id"])
    op.create_index("ix_job_write_places_key", "job_write_places", ["key"])
    _record_existing_jobs(places)


def downgrade() -> None:
    op.drop_index("ix_job_write_places_key", table_name="job_write_places")
    op.drop_index("ix_job_write_places_job_id", table_name="job_write_places")
    op.drop_table("job_write_places")
    op.drop_index("ix_project_grants_project", table_name="project_grants")
    op.drop_table("project_grants")


def _record_existing_jobs(places: sa.Table) -> None:
    connection = op.get_bind()
    jobs = sa.table(
        "training_jobs",
        sa.column("id", sa.String),
        sa.column("name", sa.String),
        sa.column("project", sa.String),
        sa.column("spec", sa.JSON),
    )
    rows: list[dict[str, Any]] = []
    for job_id, name, project, spec in connection.execute(
        sa.select(jobs.c.id, jobs.c.name, jobs.c.project, jobs.c.spec)
    ):
        spec = spec or {}
        written = []
        if spec.get("output_path"):
            written.append(spec["output_path"].rstrip("/") + "/" + name)
        if spec.get("checkpoint_s3_uri"):
            written.append(spec["checkpoint_s3_uri"])
        for key in dict.fromkeys(filter(None, map(_key, written))):
            rows.append({"job_id": job_id, "project": project, "key": key})
        if len(rows) >= _BATCH:
            connection.execute(sa.insert(places), rows)
            rows = []
    if rows:
        connection.execute(sa.insert(places), rows)


def _key(uri: str) -> str | None:
    """A URI's key as written: the path (``..`` resolved) or bucket and key."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        path = os.fsdecode(unquote_to_bytes(parts.path))
        return "file://" + os.path.normpath(path) if path.startswith("/") else None
    if parts.scheme == "s3":
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return f"s3://{bucket}" + posixpath.normpath("/" + key.lstrip("/")).rstrip("/")
    return None
