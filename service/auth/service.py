"""Issuing and checking credentials."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from service.auth import sessions, tokens
from service.auth.access import Principal, Role
from service.auth.models import DEFAULT_PROJECT, ApiToken, ConsoleSession, Project
from service.kit import access_cache
from service.kit.db import utcnow
from service.kit.errors import Conflict, Forbidden, NotFound

# last_used_at is a hint for people, not an audit log: written at most this often, so a
# busy client does not turn every read into a write.
TOUCH_EVERY = timedelta(minutes=1)


def create_token(
    session: Session,
    name: str,
    token: str | None = None,
    *,
    project: str = DEFAULT_PROJECT,
    role: Role = Role.MEMBER,
    server_admin: bool = False,
) -> str:
    """Store a new user token (or the one given) and return it; this is the only time it
    is readable."""
    require_project(session, project)
    if _in_force(session, project, name) is not None:
        raise Conflict(f"project {project!r} already has a token named {name!r}")
    # A revoked token's name may be used again: the old row keeps its history under a
    # name that says so.
    for old in session.scalars(
        select(ApiToken).where(ApiToken.project == project, ApiToken.name == name)
    ):
        old.name = f"{name}~revoked-{old.id}"[:64]
    token = token or tokens.new_user_token()
    session.add(
        ApiToken(
            name=name,
            project=project,
            role=role.label,
            server_admin=server_admin,
            prefix=token[:12],
            token_hash=tokens.hash_token(token),
            access_key_id=tokens.new_access_key_id(),
        )
    )
    session.flush()
    return token


def list_tokens(session: Session, principal: Principal) -> list[ApiToken]:
    """The tokens of the caller's project (every project's, for a server administrator)."""
    query = select(ApiToken).where(ApiToken.revoked_at.is_(None))
    if not principal.server_admin:
        query = query.where(ApiToken.project == principal.project)
    return list(session.scalars(query.order_by(ApiToken.project, ApiToken.name)))


def revoke_token(session: Session, principal: Principal, project: str, name: str) -> None:
    principal.require(Role.ADMIN, project, "revoking a token")
    row = _in_force(session, project, name)
    if row is None:
        raise NotFound(f"project {project!r} has no token named {name!r}")
    if row.server_admin and not principal.server_admin:
        # A project's admin is not above the server's: it may not lock it out.
        raise Forbidden(f"{name!r} is a server administrator's token")
    row.revoked_at = utcnow()
    session.flush()


def _in_force(session: Session, project: str, name: str) -> ApiToken | None:
    """The project's token of that name that has not been revoked."""
    return session.scalar(
        select(ApiToken).where(
            ApiToken.project == project, ApiToken.name == name, ApiToken.revoked_at.is_(None)
        )
    )


def require_project(session: Session, name: str) -> None:
    """Refuse a project that does not exist: a server administrator, who sees every
    project, may name any, and nothing may be made in one that is not there."""
    if session.get(Project, name) is None:
        raise NotFound(f"no project named {name!r}")


def create_project(session: Session, name: str) -> Project:
    if session.get(Project, name) is not None:
        raise Conflict(f"a project named {name!r} already exists")
    project = Project(name=name)
    session.add(project)
    session.flush()
    access_cache.forget_once_committed(session)
    return project


def list_projects(session: Session, principal: Principal) -> list[Project]:
    query = select(Project).order_by(Project.name)
    if not principal.server_admin:
        query = query.where(Project.name == principal.project)
    return list(session.scalars(query))


def authenticate(session: Session, signing_key: bytes, token: str) -> Principal | None:
    instance = tokens.instance_from_token(signing_key, token)
    if instance is not None:
        job_id, host = instance
        return Principal(
            kind="job", name=f"job:{job_id}:{host}", project="", job_id=job_id, host=host
        )
    row = session.scalar(
        select(ApiToken).where(
            ApiToken.token_hash == tokens.hash_token(token), ApiToken.revoked_at.is_(None)
        )
    )
    return None if row is None else principal_of(row)


def access_key_holder(
    session: Session, signing_key: bytes, access_key: str
) -> tuple[Principal, str] | None:
    """Who holds an AWS access key, and its secret (to check a signature with); None when
    no token in force has that key."""
    row = session.scalar(select(ApiToken).where(ApiToken.access_key_id == access_key))
    if row is None:
        row = _legacy_access_key_holder(session, access_key)
    if row is None or row.revoked_at is not None:
        return None
    return principal_of(row), tokens.secret_access_key(signing_key, row.id, row.token_hash)


def _legacy_access_key_holder(session: Session, access_key: str) -> ApiToken | None:
    """The token made before ids were random whose id ``access_key`` is: a token with an id
    of its own is never reached by its row's number."""
    token_id = tokens.token_id_of_legacy_access_key(access_key)
    row = None if token_id is None else session.get(ApiToken, token_id)
    return row if row is not None and row.access_key_id is None else None


def aws_credentials(session: Session, signing_key: bytes, token_id: int) -> tuple[str, str]:
    """The access key id and secret of a user token."""
    row = session.get(ApiToken, token_id)
    if row is None or row.revoked_at is not None:
        raise NotFound("the token has been revoked")
    key_id = row.access_key_id or tokens.legacy_access_key_id(row.id)
    return key_id, tokens.secret_access_key(signing_key, row.id, row.token_hash)


def begin_console_session(session: Session, session_id: str, token_id: int) -> None:
    """Record a console session; sessions older than any cookie can live are let go."""
    oldest = utcnow() - timedelta(seconds=sessions.LIFETIME_SECONDS)
    session.execute(delete(ConsoleSession).where(ConsoleSession.created_at < oldest))
    session.add(ConsoleSession(id=session_id, token_id=token_id))
    session.flush()


def end_console_session(session: Session, session_id: str) -> None:
    session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.id == session_id, ConsoleSession.ended_at.is_(None))
        .values(ended_at=utcnow())
    )


def authenticate_console_session(
    session: Session, session_id: str, token_id: int
) -> Principal | None:
    """The holder of a console session still standing, begun with a token still in force
    (so signing out, or revoking the token, ends it)."""
    row = session.get(ConsoleSession, session_id)
    if row is None or row.ended_at is not None or row.token_id != token_id:
        return None
    token = session.get(ApiToken, token_id)
    return None if token is None or token.revoked_at is not None else principal_of(token)


def principal_of(row: ApiToken) -> Principal:
    return Principal(
        kind="user",
        name=row.name,
        project=row.project,
        role=Role.of(row.role),
        server_admin=row.server_admin,
        token_id=row.id,
        last_used_at=row.last_used_at,
    )


def needs_touch(principal: Principal) -> bool:
    last = principal.last_used_at
    return principal.token_id is not None and (last is None or last < utcnow() - TOUCH_EVERY)


def touch(session: Session, principal: Principal) -> Principal:
    """Note that the principal's token was used now; the principal as it now stands."""
    now = utcnow()
    session.execute(
        update(ApiToken).where(ApiToken.id == principal.token_id).values(last_used_at=now)
    )
    return dataclasses.replace(principal, last_used_at=now)


def ensure_admin_token(session: Session, token_file: Path, configured: str | None = None) -> str:
    """Make sure ``token_file`` holds a valid server administrator's token: the configured
    one (stored if new: every replica of a deployment then shares it), else the file's,
    else a new one."""
    if session.get(Project, DEFAULT_PROJECT) is None:
        session.add(Project(name=DEFAULT_PROJECT))
        session.flush()
        access_cache.forget_once_committed(session)
    candidates = [configured] if configured is not None else []
    if configured is None and token_file.exists():
        candidates.append(token_file.read_text().strip())
    for token in filter(None, candidates):
        row = session.scalar(
            select(ApiToken).where(ApiToken.token_hash == tokens.hash_token(token))
        )
        # A configured token is the operator's word, whatever became of it since.
        if row is not None and (token == configured or row.revoked_at is None):
            row.server_admin = True
            session.flush()
            _write_token(token_file, token)
            return token
    token = create_token(
        session, _free_admin_name(session), configured, role=Role.ADMIN, server_admin=True
    )
    _write_token(token_file, token)
    return token


def _free_admin_name(session: Session) -> str:
    names = set(session.scalars(select(ApiToken.name).where(ApiToken.project == DEFAULT_PROJECT)))
    if "admin" not in names:
        return "admin"
    return next(f"admin-{n}" for n in range(2, len(names) + 3) if f"admin-{n}" not in names)


def _write_token(token_file: Path, token: str) -> None:
    token_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = token_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.replace(tmp, token_file)
