"""Who is calling: every route but the health check and the docs needs a bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.auth.service import Principal, authenticate
from service.kit.db import session_scope
from service.kit.deps import SettingsDep
from service.kit.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False)


def get_principal(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    # A short read of its own: the request's transaction starts only when the route
    # needs it, so an upload streaming in holds no database lock.
    with session_scope(settings.database_url, readonly=True) as session:
        principal = authenticate(session, settings.signing_key(), credentials.credentials)
    if principal is None:
        raise Unauthorized("invalid or revoked token")
    return principal


def require_user(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.kind != "user":
        raise Forbidden("job tokens may only report for their own job")
    return principal


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
CurrentUser = Annotated[Principal, Depends(require_user)]
