"""The places a server administrator granted each project, beyond its own area."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.grants.places import MAX_PREFIX
from service.kit.db import Base, UTCDateTime, utcnow


class ProjectGrant(Base):
    __tablename__ = "project_grants"
    __table_args__ = (
        UniqueConstraint("project", "prefix", name="uq_project_grants_project_prefix"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(
        String(64), ForeignKey("projects.name", name="fk_project_grants_project"), index=True
    )
    # A file:// directory or an s3:// prefix, as service.grants.places.canonical_prefix
    # accepts it.
    prefix: Mapped[str] = mapped_column(String(MAX_PREFIX))
    # read-only or read-write (service.grants.places.Access).
    access: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
