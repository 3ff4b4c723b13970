from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import AwareDatetime, StringConstraints
from sqlalchemy import Row

from contract import storage
from contract.protocol import JOBS_PATH
from service.auth import service as auth
from service.auth.access import Principal, Role
from service.auth.deps import CurrentUser
from service.capacity import service as capacity
from service.capacity.schemas import PlacePublic
from service.jobs import environment, lookup
from service.jobs.listing import DEFAULT_SORT, MAX_TAG_FILTERS, JobFilters, JobSort, TagFilter
from service.jobs.models import TrainingJob
from service.jobs.params import JobName, ProjectName
from service.jobs.public import public_of
from service.jobs.schemas import (
    DryRun,
    JobCreate,
    JobDeleted,
    JobPublic,
    JobsPage,
    JobSummary,
)
from service.jobs.states import Status
from service.kit.db import session_scope
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import SpecError, replies
from service.kit.text import LookupText
from service.settings import Settings
from service.training import cloning, deletion, service
from service.training.submissions import Submissions

router = APIRouter(prefix=JOBS_PATH, tags=["training jobs"])


@dataclass(frozen=True)
class Submitter:
    """Who submits a job, and to which project."""

    user: Principal
    project: str


async def submitter(user: CurrentUser, project: ProjectName = None) -> Submitter:
    """The caller and the project a job is submitted to, once the caller may submit there:
    decided from the credentials and the query alone, before the body is validated, so a
    viewer's body (its metric patterns, say) costs no compiling. One dependency for both:
    FastAPI walks each dependency's own tree for every request, cached or not, and the
    create's tree was most of its time in the event loop."""
    chosen = user.project_in_sight(project)
    user.require(Role.MEMBER, chosen, "submitting a job")
    return Submitter(user, chosen)


@router.post(
    "",
    status_code=201,
    response_model=JobPublic,
    responses={
        200: {"model": DryRun, "description": "dry_run=true: what would be created"},
        **replies(401, 403, 404, 409, 422),
    },
)
async def create_training_job(
    spec: JobCreate,
    request: Request,
    submitting: Annotated[Submitter, Depends(submitter)],
    dry_run: Annotated[
        bool, Query(description="Show what would be created; create nothing")
    ] = False,
) -> Response:
    """Submit a training job (estimator-style spec) to the caller's project (a server
    administrator may name another). The project's capacity quotas apply to it."""
    # Read from the app, not as dependencies: see ``submitter``.
    settings: Settings = request.app.state.settings
    submissions: Submissions = request.app.state.submissions
    user, project = submitting.user, submitting.project
    if project != user.project:
        # A server administrator's choice (a token's own project exists): a create would
        # otherwise make a job in a project that is not there.
        await run_in_threadpool(_require_project, settings, project)
    if dry_run:
        plan = await run_in_threadpool(_dry_run, settings, spec, project)
        return JSONResponse(plan.model_dump(mode="json"))
    if settings.on_capacity_exceeded == "refuse":
        # Whether it fits is checked under the admission lock, in its own transaction.
        job = await run_in_threadpool(_submit_if_it_fits, settings, spec, project)
    else:
        job = await submissions.submit(spec, project)
    # Serialized here: FastAPI would check the reply against response_model once more,
    # for a JobPublic made just now.
    created = to_public(job, user).model_dump_json()
    return Response(created, status_code=201, media_type="application/json")


def _require_project(settings: Settings, project: str) -> None:
    with session_scope(settings.database_url, readonly=True) as session:
        auth.require_project(session, project)


def _dry_run(settings: Settings, spec: JobCreate, project: str) -> DryRun:
    with session_scope(settings.database_url, readonly=True) as session:
        return service.dry_run(session, settings, spec, project)


def _submit_if_it_fits(settings: Settings, spec: JobCreate, project: str) -> TrainingJob:
    with session_scope(settings.database_url) as session:
        return service.submit(session, settings, spec, project)


# A tag filter's text: a key and a value as long as a tag's, and the "=" between them.
_TAG_FILTER = Annotated[LookupText, StringConstraints(min_length=1, max_length=385)]


@router.get("", response_model=JobsPage, responses=replies(401, 422))
def list_training_jobs(
    session: ReadSessionDep,
    user: CurrentUser,
    status: Annotated[Status | None, Query(description="Only jobs in this status")] = None,
    name_prefix: Annotated[LookupText | None, Query(max_length=63)] = None,
    name_contains: Annotated[
        LookupText | None,
        Query(max_length=63, description="Only jobs whose name contains this (any case)"),
    ] = None,
    created_after: Annotated[
        AwareDatetime | None, Query(description="Only jobs created at or after this time")
    ] = None,
    created_before: Annotated[
        AwareDatetime | None, Query(description="Only jobs created before this time")
    ] = None,
    tag: Annotated[
        list[_TAG_FILTER] | None,
        Query(
            max_length=MAX_TAG_FILTERS,
            description="Only jobs with this tag: key (any value) or key=value; repeat "
            "for jobs with every one",
        ),
    ] = None,
    sort: Annotated[
        JobSort, Query(description="-created_at (newest first), created_at, name or -name")
    ] = DEFAULT_SORT,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    project: ProjectName = None,
) -> JobsPage:
    """The project's jobs, newest first unless ``sort`` says otherwise; pass
    ``next_cursor`` back as ``cursor`` (with the same ``sort``) for the next page. A server
    administrator sees every project's, or ``project``'s."""
    if created_after and created_before and created_after >= created_before:
        raise SpecError(("created_before",), "must be after created_after", source="query")
    filters = JobFilters(
        project=project,
        status=status,
        name_prefix=name_prefix,
        name_contains=name_contains,
        created_after=created_after,
        created_before=created_before,
        tags=tuple(TagFilter.parse(text, index) for index, text in enumerate(tag or [])),
    )
    rows, next_cursor = lookup.list_jobs(
        session, user, filters, limit=limit, cursor=cursor, sort=sort
    )
    return JobsPage(items=[_summary(job) for job in rows], next_cursor=next_cursor)


@router.get("/{name}", response_model=JobPublic, responses=replies(401, 404, 422))
def describe_training_job(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> JobPublic:
    return to_public(lookup.get(session, name, user, project), user)


@router.get("/{name}/clone", responses=replies(401, 404, 422))
def clone_training_job(
    name: JobName,
    session: ReadSessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    project: ProjectName = None,
) -> dict[str, Any]:
    """The job's spec to submit a copy of it: as it was submitted, less what the server
    chose for it (its name, backend, image, default output path, and the hyperparameters
    its distribution mode added), which a copy gets chosen anew."""
    return cloning.resubmittable(settings, lookup.get(session, name, user, project), user)


@router.get("/{name}/place-in-line", response_model=PlacePublic, responses=replies(401, 404, 422))
def place_in_line(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> PlacePublic:
    """Where the job stands in the line for its instance type: 1 starts next."""
    place = capacity.place_in_line(session, lookup.get(session, name, user, project))
    return PlacePublic(
        instance_type=place.instance_type, place=place.place, waiting_count=place.waiting_count
    )


@router.get(
    "/{name}/model",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "model.tar.gz"},
        **replies(401, 404, 409, 422),
    },
)
def download_model(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> StreamingResponse:
    """The job's model (its model.tar.gz), as the artifact store holds it; 409 for a job
    whose model is stored as files (output_compression NONE), which says where."""
    uri, size = lookup.stored_model(lookup.get(session, name, user, project))
    return _tarball(uri, size, f"{name}-model.tar.gz")


@router.get(
    "/{name}/output",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "output.tar.gz"},
        **replies(401, 404, 422),
    },
)
def download_output_data(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> StreamingResponse:
    """What the job's script wrote to SM_OUTPUT_DATA_DIR (its output.tar.gz), as the
    artifact store holds it."""
    uri, size = lookup.stored_output_data(lookup.get(session, name, user, project))
    return _tarball(uri, size, f"{name}-output.tar.gz")


def _tarball(uri: str, size: int, filename: str) -> StreamingResponse:
    return StreamingResponse(
        storage.read_chunks(uri),
        media_type="application/gzip",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{filename}"',
        },
    )


@router.post("/{name}/stop", response_model=JobPublic, responses=replies(401, 403, 404, 409, 422))
async def stop_training_job(
    name: JobName,
    request: Request,
    user: CurrentUser,
    project: ProjectName = None,
) -> Response:
    """Stop a running job: its scripts get SIGTERM and a grace period, then it is Stopped."""
    submissions: Submissions = request.app.state.submissions
    # Stopped by the thread that stores creates, with the stops asked meanwhile: one
    # transaction for a batch of them (``Submissions.stop``).
    stopped = await submissions.stop(
        name, user, project, lambda job: to_public(job, user).model_dump_json()
    )
    return Response(stopped, media_type="application/json")


@router.delete("/{name}", response_model=JobDeleted, responses=replies(401, 403, 404, 409, 422))
def delete_training_job(
    name: JobName,
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    artifacts: Annotated[
        deletion.ArtifactsChoice,
        Query(description="remove: delete the job's artifacts under <output_path>/<name>/ too"),
    ] = "keep",
    project: ProjectName = None,
) -> JobDeleted:
    """Delete an ended job: its record, transitions, instances, metrics and logs. Its
    artifacts stay unless ``artifacts=remove``. A job still running is refused (409)."""
    return deletion.delete(session, settings, name, user, project, artifacts)


def to_public(job: TrainingJob, caller: Principal) -> JobPublic:
    """The job as ``caller`` may read it: its environment's secret-looking values masked
    for a viewer (``service.jobs.environment``)."""
    shown = job.record.model_copy(update={"environment": environment.shown_to(caller, job)})
    return public_of(job, shown)


def _summary(row: Row[Any]) -> JobSummary:
    return JobSummary.model_validate(row)
