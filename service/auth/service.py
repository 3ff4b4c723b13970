"""Issuing and checking credentials."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth import tokens
from service.auth.models import ApiToken


@dataclass(frozen=True)
class Principal:
    kind: Literal["user", "job"]
    name: str
    job_id: str | None = None


def create_token(session: Session, name: str, token: str | None = None) -> str:
    """Store a new user token (or the one given) and return it; this is the only time it
    is readable."""
    token = token or tokens.new_user_token()
    session.add(ApiToken(name=name, prefix=token[:12], token_hash=tokens.hash_token(token)))
    session.flush()
    return token


def authenticate(session: Session, signing_key: bytes, token: str) -> Principal | None:
    job_id = tokens.job_id_from_token(signing_key, token)
    if job_id is not None:
        return Principal(kind="job", name=f"job:{job_id}", job_id=job_id)
    row = session.scalar(
        select(ApiToken).where(
            ApiToken.token_hash == tokens.hash_token(token), ApiToken.revoked_at.is_(None)
        )
    )
    if row is None:
        return None
    return Principal(kind="user", name=row.name)


def ensure_admin_token(session: Session, token_file: Path, configured: str | None = None) -> str:
    """Make sure ``token_file`` holds a valid admin token: the configured one (stored if new:
    every replica of a deployment then shares it), else the file's, else a new one."""
    if configured is not None:
        if not session.scalar(
            select(ApiToken.id).where(ApiToken.token_hash == tokens.hash_token(configured))
        ):
            create_token(session, "admin", configured)
        _write_token(token_file, configured)
        return configured
    if token_file.exists():
        existing = token_file.read_text().strip()
        if existing and session.scalar(
            select(ApiToken.id).where(ApiToken.token_hash == tokens.hash_token(existing))
        ):
            return existing
    token = create_token(session, "admin")
    _write_token(token_file, token)
    return token


def _write_token(token_file: Path, token: str) -> None:
    token_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = token_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.replace(tmp, token_file)
