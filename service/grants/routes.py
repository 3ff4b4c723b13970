"""A project's granted places: listed by its admins, granted and revoked by a server
administrator, beside the project routes (``/v1/projects``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response

from service.auth.access import Role
from service.auth.deps import CurrentUser
from service.auth.schemas import NAME_PATTERN
from service.grants import service
from service.grants.models import ProjectGrant
from service.grants.places import MAX_PREFIX
from service.grants.schemas import GrantCreate, GrantPublic, GrantsPage
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import Forbidden, replies

router = APIRouter(prefix="/v1/projects/{project}/grants", tags=["projects"])

ProjectPath = Annotated[str, Path(min_length=1, max_length=64, pattern=NAME_PATTERN)]


async def granting_project(user: CurrentUser, project: ProjectPath) -> str:
    """The project whose grants change, once the caller may change them: a server
    administrator (a project's own admin may not widen what its jobs reach). Decided from
    the credentials and the path alone, before the body is validated."""
    user.project_in_sight(project)
    if not user.server_admin:
        raise Forbidden("granting or revoking a project's places needs a server administrator")
    return project


GrantingProject = Annotated[str, Depends(granting_project)]


@router.get("", response_model=GrantsPage, responses=replies(401, 403, 404, 422))
def list_grants(project: ProjectPath, session: ReadSessionDep, user: CurrentUser) -> GrantsPage:
    """The places granted to the project beyond its own area (its admins, and server
    administrators)."""
    user.require(Role.ADMIN, user.project_in_sight(project), "listing a project's grants")
    return GrantsPage(items=[_public(row) for row in service.grants(session, project)])


@router.post(
    "",
    status_code=201,
    response_model=GrantPublic,
    responses={
        200: {"description": "The grant was there: its access is now the one asked"},
        **replies(401, 403, 404, 409, 422),
    },
)
def grant(
    project: GrantingProject,
    body: GrantCreate,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
) -> GrantPublic:
    """Grant the project's jobs a place to read (read-only) or to read and write
    (read-write), or change how (server administrators only)."""
    row, created = service.grant(session, settings, project, body.prefix, body.access)
    if not created:
        response.status_code = 200
    return _public(row)


@router.delete("", status_code=204, responses=replies(401, 403, 404, 422))
def revoke(
    project: GrantingProject,
    session: SessionDep,
    prefix: Annotated[str, Query(min_length=1, max_length=MAX_PREFIX)],
) -> None:
    """Take a grant back: jobs submitted from now on may no longer name the place, and
    jobs already submitted are refused it when their instances start or renew their
    credentials (server administrators only)."""
    service.revoke(session, project, prefix)


def _public(row: ProjectGrant) -> GrantPublic:
    return GrantPublic(
        project=row.project,
        prefix=row.prefix,
        access=row.access,
        created_at=row.created_at,
    )
