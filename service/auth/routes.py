from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.auth.deps import CurrentUser
from service.auth.service import create_token
from service.kit.deps import SessionDep

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")


class TokenCreated(BaseModel):
    name: str
    token: str


@router.post("", status_code=201, response_model=TokenCreated)
def mint_token(body: TokenCreate, session: SessionDep, _user: CurrentUser) -> TokenCreated:
    """Create another API token. It is shown once; only its hash is kept."""
    return TokenCreated(name=body.name, token=create_token(session, body.name))
