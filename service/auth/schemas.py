"""What the token, project and session routes take and give."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from service.auth.access import RoleName

# Names people type and read; the same rule for tokens and projects.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
Name = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Name
    # Unset: the caller's own project.
    project: str | None = Field(default=None, min_length=1, max_length=64, pattern=NAME_PATTERN)
    role: RoleName = "member"


class TokenCreated(BaseModel):
    name: str
    project: str
    role: RoleName
    token: str


class TokenPublic(BaseModel):
    name: str
    project: str
    role: RoleName
    server_admin: bool
    created_at: datetime
    last_used_at: datetime | None


class TokensPage(BaseModel):
    items: list[TokenPublic]


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Name


class ProjectPublic(BaseModel):
    name: str
    created_at: datetime


class ProjectsPage(BaseModel):
    items: list[ProjectPublic]


class Me(BaseModel):
    name: str
    project: str
    role: RoleName
    server_admin: bool
    # Only for a console session: the value its requests that change anything send as
    # X-CSRF-Token.
    csrf_token: str | None = None


class AwsCredentials(BaseModel):
    """The caller's token as AWS credentials, for clients that sign with SigV4 (boto3's
    sagemaker and logs clients, the SageMaker Python SDK); the token's project and role
    apply to what they do."""

    access_key_id: str
    secret_access_key: str


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=512)
