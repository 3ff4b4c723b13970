"""Who is calling: every route but the health check and the docs needs a bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.auth.service import Principal, authenticate
from service.kit.deps import SessionDep, SettingsDep
from service.kit.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False)


def get_principal(
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
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
