"""``/v1/tuning-jobs``: create, list, describe and stop hyperparameter tuning jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from contract.protocol import TUNING_JOBS_PATH
from service.auth.access import Role
from service.auth.deps import CurrentUser
from service.jobs.params import ProjectName
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import replies
from service.tuning import service
from service.tuning.schemas import (
    MAX_NAME,
    NAME_PATTERN,
    Status,
    TuningJobCreate,
    TuningJobPublic,
    TuningJobsPage,
)

router = APIRouter(prefix=TUNING_JOBS_PATH, tags=["tuning jobs"])

TuningJobName = Annotated[str, Path(max_length=MAX_NAME, pattern=NAME_PATTERN)]


@router.post(
    "", status_code=201, response_model=TuningJobPublic, responses=replies(401, 403, 404, 409, 422)
)
def create_tuning_job(
    spec: TuningJobCreate,
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    project: ProjectName = None,
) -> TuningJobPublic:
    """Create a tuning job in the caller's project (a server administrator may name
    another): its trials are training jobs of that project, under its quotas."""
    project = user.project_in_sight(project)
    user.require(Role.MEMBER, project, "creating a tuning job")
    return service.public(session, service.create(session, settings, spec, project))


@router.get("", response_model=TuningJobsPage, responses=replies(401, 404, 422))
def list_tuning_jobs(
    session: ReadSessionDep,
    user: CurrentUser,
    status: Annotated[Status | None, Query(description="Only tuning jobs in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    project: ProjectName = None,
) -> TuningJobsPage:
    """The project's tuning jobs, newest first, each with its counters and best trial;
    pass ``next_cursor`` back as ``cursor`` for the next page."""
    return service.page(session, user, project, limit=limit, cursor=cursor, status=status)


@router.get("/{name}", response_model=TuningJobPublic, responses=replies(401, 404, 422))
def describe_tuning_job(
    name: TuningJobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> TuningJobPublic:
    """The tuning job, its trials (each a training job) and the best of them so far."""
    return service.public(session, service.get(session, name, user, project))


@router.post(
    "/{name}/stop", response_model=TuningJobPublic, responses=replies(401, 403, 404, 409, 422)
)
def stop_tuning_job(
    name: TuningJobName,
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    project: ProjectName = None,
) -> TuningJobPublic:
    """Stop the tuning job: no more trials are asked for, its running trials are
    stopped, and it is Stopped once they have ended."""
    return service.public(session, service.stop(session, settings, name, user, project))
