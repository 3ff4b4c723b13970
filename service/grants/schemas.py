"""What the grant routes take and give."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.grants.places import MAX_PREFIX, Access, canonical_prefix


class GrantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A file:// directory or an s3:// prefix, written as canonical_prefix accepts it.
    prefix: str = Field(min_length=1, max_length=MAX_PREFIX)
    access: Access = "read-only"

    @field_validator("prefix")
    @classmethod
    def _allowed_form(cls, value: str) -> str:
        return canonical_prefix(value)


class GrantPublic(BaseModel):
    project: str
    prefix: str
    access: Access
    created_at: datetime


class GrantsPage(BaseModel):
    items: list[GrantPublic]
