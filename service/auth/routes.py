"""Tokens, projects, and the caller's own identity and console session."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from service.auth import service, sessions
from service.auth.access import Principal, Role
from service.auth.deps import CurrentUser
from service.auth.schemas import (
    AwsCredentials,
    Me,
    ProjectCreate,
    ProjectPublic,
    ProjectsPage,
    SignIn,
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPage,
)
from service.kit.db import after_commit
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import Forbidden, Unauthorized, replies

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])
projects_router = APIRouter(prefix="/v1/projects", tags=["projects"])
me_router = APIRouter(prefix="/v1", tags=["identity"])
# Open without a token: signing in is how a browser gets its session.
session_router = APIRouter(prefix="/v1", tags=["identity"])


@router.post(
    "", status_code=201, response_model=TokenCreated, responses=replies(401, 403, 404, 409, 422)
)
def mint_token(body: TokenCreate, session: SessionDep, user: CurrentUser) -> TokenCreated:
    """Create a token in a project with a role; shown once, only its hash is kept. A
    project's admins mint for their project; a server administrator for any."""
    project = user.project_in_sight(body.project)
    user.require(Role.ADMIN, project, "minting a token")
    token = service.create_token(session, body.name, project=project, role=Role.of(body.role))
    return TokenCreated(name=body.name, project=project, role=body.role, token=token)


@router.get("", response_model=TokensPage, responses=replies(401, 403))
def list_tokens(session: ReadSessionDep, user: CurrentUser) -> TokensPage:
    """The project's tokens in force (every project's, for a server administrator):
    names, roles and use, never the secrets. Listing them needs the admin role."""
    user.require(Role.ADMIN, user.project, "listing tokens")
    return TokensPage(
        items=[
            TokenPublic(
                name=row.name,
                project=row.project,
                role=row.role,
                server_admin=row.server_admin,
                created_at=row.created_at,
                last_used_at=row.last_used_at,
            )
            for row in service.list_tokens(session, user)
        ]
    )


@router.delete("/{name}", status_code=204, responses=replies(401, 403, 404, 422))
def revoke_token(
    name: str,
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    project: str | None = None,
) -> None:
    """Revoke a token at once: its requests and console sessions are refused from now (by
    other API replicas of the deployment within RUNYARD_TOKEN_CACHE_SECONDS)."""
    service.revoke_token(session, user, user.project_in_sight(project), name)
    # Which token hash the name had is not known here: forget every holder.
    after_commit(session, request.app.state.principals.forget_all)


@projects_router.post(
    "", status_code=201, response_model=ProjectPublic, responses=replies(401, 403, 409, 422)
)
def create_project(body: ProjectCreate, session: SessionDep, user: CurrentUser) -> ProjectPublic:
    """Create a project (server administrators only)."""
    if not user.server_admin:
        raise Forbidden("creating a project needs a server administrator's token")
    project = service.create_project(session, body.name)
    return ProjectPublic(name=project.name, created_at=project.created_at)


@projects_router.get("", response_model=ProjectsPage, responses=replies(401))
def list_projects(session: ReadSessionDep, user: CurrentUser) -> ProjectsPage:
    """The projects the caller reaches: its own, or every one for a server administrator."""
    return ProjectsPage(
        items=[
            ProjectPublic(name=p.name, created_at=p.created_at)
            for p in service.list_projects(session, user)
        ]
    )


@me_router.get("/me", response_model=Me, responses=replies(401, 403))
def who_am_i(request: Request, settings: SettingsDep, user: CurrentUser) -> Me:
    """The caller's token: its name, project and role (and, in a console session, the
    CSRF token its changing requests must send)."""
    csrf = None
    cookie = request.cookies.get(sessions.COOKIE)
    if cookie and "authorization" not in request.headers:
        session = sessions.read(settings.signing_key(), cookie)
        csrf = session.csrf(settings.signing_key()) if session else None
    return _me(user, csrf)


@me_router.post("/me/aws-credentials", response_model=AwsCredentials, responses=replies(401, 403))
def aws_credentials(
    request: Request, session: ReadSessionDep, settings: SettingsDep, user: CurrentUser
) -> AwsCredentials:
    """The caller's token as an AWS access key id and secret, for SageMaker's clients.
    Only a bearer token may ask: a console session does not hold its token."""
    if user.token_id is None or "authorization" not in request.headers:
        raise Forbidden("AWS credentials are given for a bearer token only")
    access_key, secret = service.aws_credentials(session, settings.signing_key(), user.token_id)
    return AwsCredentials(access_key_id=access_key, secret_access_key=secret)


@session_router.post("/session", response_model=Me, responses=replies(401, 422))
def sign_in(
    body: SignIn, request: Request, response: Response, session: SessionDep, settings: SettingsDep
) -> Me:
    """Begin a console session with a token: sets an HttpOnly session cookie."""
    principal = service.authenticate(session, settings.signing_key(), body.token)
    if principal is None or principal.kind != "user" or principal.token_id is None:
        raise Unauthorized("invalid or revoked token")
    began = sessions.begin(settings.signing_key(), principal.token_id)
    service.begin_console_session(session, began.id, principal.token_id)
    response.set_cookie(
        sessions.COOKIE,
        began.value,
        max_age=sessions.LIFETIME_SECONDS,
        path=_cookie_path(request),
        secure=request.url.scheme == "https" or settings.public_url.startswith("https://"),
        httponly=True,
        samesite="strict",
    )
    return _me(principal, began.csrf(settings.signing_key()))


@session_router.delete("/session", status_code=204)
def sign_out(
    request: Request, response: Response, session: SessionDep, settings: SettingsDep
) -> None:
    """End the console session: on the server (a copy of its cookie is refused from now
    on) and in the browser. The token itself stays valid."""
    cookie = request.cookies.get(sessions.COOKIE)
    ended = sessions.read(settings.signing_key(), cookie) if cookie else None
    if ended is not None:
        service.end_console_session(session, ended.id)
    response.delete_cookie(
        sessions.COOKIE, path=_cookie_path(request), httponly=True, samesite="strict"
    )


def _cookie_path(request: Request) -> str:
    # Behind an Ingress under a prefix, the cookie belongs to that prefix alone.
    return (request.scope.get("root_path") or "") + "/"


def _me(principal: Principal, csrf: str | None) -> Me:
    return Me(
        name=principal.name,
        project=principal.project,
        role=principal.role.label,
        server_admin=principal.server_admin,
        csrf_token=csrf,
    )
