from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from service.auth.access import Role
from service.auth.deps import CurrentUser
from service.kit.deps import SettingsDep
from service.kit.errors import replies
from service.sources import service

router = APIRouter(prefix="/v1/sources", tags=["sources"])


class SourceStored(BaseModel):
    source_uri: str


@router.post(
    "",
    status_code=201,
    response_model=SourceStored,
    responses={
        200: {"model": SourceStored, "description": "dry_run=true: nothing stored"},
        **replies(401, 403, 413, 422),
    },
    openapi_extra={
        "requestBody": {
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}
        }
    },
)
async def upload_source(
    request: Request,
    settings: SettingsDep,
    user: CurrentUser,
    dry_run: Annotated[
        bool, Query(description="Check the bundle and say where it would be stored; store nothing")
    ] = False,
) -> SourceStored | JSONResponse:
    """Store a source bundle (the body: a .tar.gz) and return the ``source_uri`` to submit with."""
    user.require(Role.MEMBER, user.project, "uploading source code")
    stored = SourceStored(
        source_uri=await service.store(settings, request.stream(), dry_run=dry_run)
    )
    return JSONResponse(stored.model_dump()) if dry_run else stored
