"""The path and query parameters that name a job, a host and a project, as every route
that reads a job takes them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator

from service.auth.schemas import NAME_PATTERN
from service.jobs.spec_parts import NAME_SCHEMA, job_name

JobName = Annotated[str, Path(json_schema_extra=NAME_SCHEMA), AfterValidator(job_name)]
HostName = Annotated[str, Path(max_length=32, pattern=r"^algo-[1-9][0-9]*$")]
ProjectName = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=64,
        pattern=NAME_PATTERN,
        description="The project (default: the token's)",
    ),
]
