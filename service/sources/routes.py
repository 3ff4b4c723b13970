from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from service.auth.deps import CurrentUser
from service.kit.deps import SettingsDep
from service.sources import service

router = APIRouter(prefix="/v1/sources", tags=["sources"])


class SourceStored(BaseModel):
    source_uri: str


@router.post(
    "",
    status_code=201,
    response_model=SourceStored,
    openapi_extra={
        "requestBody": {
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}
        }
    },
)
async def upload_source(
    request: Request, settings: SettingsDep, _user: CurrentUser
) -> SourceStored:
    """Store a source bundle (the body: a .tar.gz) and return the ``source_uri`` to submit with."""
    return SourceStored(source_uri=await service.store(settings, request.stream()))
