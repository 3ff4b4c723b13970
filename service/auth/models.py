"""Projects and API tokens. Only a token's hash is stored; the token itself is shown once,
when it is made."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.kit.db import Base, UTCDateTime, utcnow

# The project every job and token belonged to before there were projects, and the one the
# bootstrap administrator's token is in.
DEFAULT_PROJECT = "default"


class Project(Base):
    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ConsoleSession(Base):
    """A browser's session, begun with a token; it stands until signed out or expired."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("api_tokens.id", name="fk_console_sessions_token"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    # A name says who holds the token within its project; the project says what it reaches.
    __table_args__ = (UniqueConstraint("project", "name", name="uq_api_tokens_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(
        String(64),
        ForeignKey("projects.name", name="fk_api_tokens_project"),
        default=DEFAULT_PROJECT,
    )
    # viewer, member or admin of its project (service.auth.access.Role).
    role: Mapped[str] = mapped_column(String(16), default="member")
    # A server administrator reaches every project and creates projects.
    server_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    prefix: Mapped[str] = mapped_column(String(12))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The AWS access key id of its credentials, random (service.auth.tokens). Tokens made
    # before there was one have none: theirs is still derived from the row's id.
    access_key_id: Mapped[str | None] = mapped_column(String(20), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Written at most once a minute per token (service.auth.service.TOUCH_EVERY).
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
