"""Who is calling: every route but the health check, the docs and the console's pages
needs a bearer token or a console session."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from service.auth import sessions, tokens
from service.auth.access import Principal
from service.auth.principal_cache import PrincipalCache
from service.auth.service import (
    authenticate,
    authenticate_console_session,
    needs_touch,
    touch,
)
from service.kit.db import autocommit_reads, session_scope
from service.kit.errors import Forbidden, Unauthorized
from service.settings import Settings

# Where no credentials are asked for: signing in takes a token in its body.
OPEN_PATHS = frozenset({"/v1/session"})
MISSING_CREDENTIALS = "missing bearer token (Authorization: Bearer <token>)"
_bearer = HTTPBearer(auto_error=False)
_cookie = APIKeyCookie(name=sessions.COOKIE, auto_error=False)


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Principal:
    # Async: a token's holder read a moment ago needs no database, so no hand-off to the
    # thread pool (see service.kit.deps); only a read goes there. The settings are read
    # from the app, not as a dependency: FastAPI walks every dependency of every request.
    principal = _remembered(request, credentials)
    if principal is None:
        settings: Settings = request.app.state.settings
        principal = await run_in_threadpool(identify, request, settings, credentials, cookie)
    request.state.principal = principal
    return principal


def _bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is not None and credentials.scheme.lower() == "bearer":
        return credentials.credentials
    return None


def _principals(request: Request) -> PrincipalCache:
    cache: PrincipalCache = request.app.state.principals
    return cache


def _remembered(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> Principal | None:
    """The holder of the request's bearer token, as this process read it a moment ago
    (see service.auth.principal_cache); None when it must be read."""
    token = _bearer_token(credentials)
    if token is None:
        return None
    principal = _principals(request).get(tokens.hash_token(token))
    # A use that is due to be recorded goes to the database anyway.
    return None if principal is None or needs_touch(principal) else principal


def identify(
    request: Request,
    settings: Settings,
    credentials: HTTPAuthorizationCredentials | None,
    cookie: str | None,
) -> Principal:
    key = settings.signing_key()
    token = _bearer_token(credentials)
    principals = _principals(request)
    generation = principals.generation
    # A short read of its own: the request's transaction starts only when the route
    # needs it, so an upload streaming in holds no database lock.
    with autocommit_reads(settings.database_url) as db:
        if token is not None:
            principal = authenticate(db, key, token)
            if principal is None:
                raise Unauthorized("invalid or revoked token")
        elif cookie is not None:
            session = sessions.read(key, cookie)
            principal = (
                authenticate_console_session(db, session.id, session.token_id) if session else None
            )
            if session is None or principal is None:
                raise Unauthorized("the console session has ended; sign in again")
            if not sessions.csrf_ok(
                key, session, request.method, request.headers.get(sessions.CSRF_HEADER)
            ):
                raise Forbidden(
                    f"a console request that changes anything needs {sessions.CSRF_HEADER}"
                )
        else:
            raise Unauthorized(MISSING_CREDENTIALS)
    if principal.token_id is not None and needs_touch(principal):
        with session_scope(settings.database_url) as db:
            principal = touch(db, principal)
    if token is not None and principal.kind == "user":
        principals.remember(tokens.hash_token(token), principal, generation)
    return principal


def credentials_key(request: Request) -> str:
    """What tells a request's credentials apart from others' (a digest of its bearer
    token and console session), without keeping them."""
    held = f"{request.headers.get('authorization', '')}\0{request.cookies.get(sessions.COOKIE, '')}"
    return hashlib.sha256(held.encode()).hexdigest()


def credentials_hold(request: Request, settings: Settings) -> bool:
    """Whether the credentials a request came with still stand (read again, not from the
    cache): a long-lived answer, such as a followed log stream, asks now and then and
    ends once its token is revoked or its console session has ended."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=value) if value else None
    try:
        identify(request, settings, credentials, request.cookies.get(sessions.COOKIE))
    except (Unauthorized, Forbidden):
        return False
    return True


async def require_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Principal:
    """The caller, who must be a user (not an instance). ``get_principal`` called, not
    depended on: FastAPI walks each dependency of every request, and a layer of its own
    cost every route that needs a user a twentieth of a create's CPU in the event loop."""
    principal = await get_principal(request, credentials, cookie)
    if principal.kind != "user":
        raise Forbidden("instance tokens may only report for their own instance")
    return principal


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
CurrentUser = Annotated[Principal, Depends(require_user)]


def admit(request: Request) -> None:
    """Refuse a request whose body failed validation if it would have been refused for its
    credentials (those are checked first, but a body that is not JSON at all is found
    before any route's dependencies run)."""
    if request.scope["path"] in OPEN_PATHS:
        return
    if getattr(request.state, "principal", None) is not None:
        return
    settings: Settings = request.app.state.settings
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    credentials = (
        HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
        if scheme and token.strip()
        else None
    )
    identify(request, settings, credentials, request.cookies.get(sessions.COOKIE))
