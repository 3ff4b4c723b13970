from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import AwareDatetime

from service.auth.deps import CurrentUser
from service.jobs import lookup
from service.jobs.params import JobName, ProjectName
from service.kit.deps import ReadSessionDep
from service.kit.errors import SpecError, replies
from service.kit.text import LookupText
from service.metrics import instance, service
from service.metrics.schemas import MetricsPublic

router = APIRouter(prefix="/v1/training-jobs", tags=["metrics"])


@router.get("/{name}/metrics", response_model=MetricsPublic, responses=replies(401, 404, 422))
def get_metrics(
    name: JobName,
    session: ReadSessionDep,
    user: CurrentUser,
    metric: Annotated[
        LookupText | None,
        Query(alias="name", min_length=1, max_length=255, description="Only this metric"),
    ] = None,
    limit: Annotated[
        int,
        Query(ge=1, le=10_000, description="At most this many points per metric, the latest"),
    ] = 1000,
    start: Annotated[
        AwareDatetime | None, Query(description="Only points at or after this time (with zone)")
    ] = None,
    end: Annotated[
        AwareDatetime | None, Query(description="Only points at or before this time (with zone)")
    ] = None,
    max_points: Annotated[
        int | None,
        Query(
            ge=1,
            le=10_000,
            description="Downsample: at most this many points per host over the whole range, "
            "each a bucket's mean with its count, minimum and maximum (limit then does not apply)",
        ),
    ] = None,
    kind: Annotated[
        Literal["definitions", "instance"],
        Query(
            description="`definitions`: the metrics the job's `metric_definitions` find in "
            "its lines; `instance`: what each instance measures of itself (CPUUtilization, "
            "MemoryUtilization, DiskUtilization, GPUUtilization, GPUMemoryUtilization), "
            "each host's points"
        ),
    ] = "definitions",
    project: ProjectName = None,
) -> MetricsPublic:
    """Each metric of the job's ``metric_definitions`` (or, with ``kind=instance``, each
    instance metric measured) with its points, ordered by time: the latest ``limit``, or
    with ``max_points`` the whole range downsampled."""
    if start is not None and end is not None and start > end:
        raise SpecError(("start",), "is after end", source="query")
    job = lookup.get(session, name, user, project)
    window = service.Window(start=start, end=end, limit=limit, max_points=max_points)
    of_kind = instance.series if kind == "instance" else service.series
    return MetricsPublic(metrics=of_kind(session, job, name=metric, window=window))
