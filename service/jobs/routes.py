from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import AfterValidator

from contract import protocol, storage
from contract.protocol import JOBS_PATH, Endpoint, instance_route
from service.auth import service as auth
from service.auth.access import Role
from service.auth.deps import CurrentPrincipal, CurrentUser
from service.auth.schemas import NAME_PATTERN
from service.capacity import service as capacity
from service.capacity.schemas import PlacePublic
from service.jobs import instance_credentials, service
from service.jobs.instance_credentials import InstanceCredentials
from service.jobs.instance_messages import (
    INTERRUPTION_NOTICE_BODY,
    read_interruption_notice,
    read_status_report,
)
from service.jobs.models import TrainingJob
from service.jobs.schemas import (
    NAME_SCHEMA,
    DryRun,
    JobCreate,
    JobPublic,
    JobsPage,
    JobSummary,
    job_name,
)
from service.jobs.states import Status
from service.jobs.submissions import Submissions
from service.kit.db import session_scope
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import NotFound, replies
from service.kit.text import LookupText
from service.settings import Settings

router = APIRouter(prefix=JOBS_PATH, tags=["training jobs"])


async def get_submissions(request: Request) -> Submissions:
    submissions: Submissions = request.app.state.submissions
    return submissions


SubmissionsDep = Annotated[Submissions, Depends(get_submissions)]

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


async def submitting_project(user: CurrentUser, project: ProjectName = None) -> str:
    """The project a job is submitted to, once the caller may submit there: decided from
    the credentials and the query alone, before the body is validated, so a viewer's body
    (its metric patterns, say) costs no compiling."""
    project = user.project_in_sight(project)
    user.require(Role.MEMBER, project, "submitting a job")
    return project


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
    settings: SettingsDep,
    user: CurrentUser,
    submissions: SubmissionsDep,
    project: Annotated[str, Depends(submitting_project)],
    dry_run: Annotated[
        bool, Query(description="Show what would be created; create nothing")
    ] = False,
) -> Response:
    """Submit a training job (estimator-style spec) to the caller's project (a server
    administrator may name another). The project's capacity quotas apply to it."""
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
    created = to_public(job).model_dump_json()
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


@router.get("", response_model=JobsPage, responses=replies(401, 422))
def list_training_jobs(
    session: ReadSessionDep,
    user: CurrentUser,
    status: Annotated[Status | None, Query(description="Only jobs in this status")] = None,
    name_prefix: Annotated[LookupText | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    project: ProjectName = None,
) -> JobsPage:
    """The project's jobs, newest first; pass ``next_cursor`` back as ``cursor`` for the
    next page. A server administrator sees every project's, or ``project``'s."""
    rows, next_cursor = service.list_jobs(
        session,
        user,
        project=project,
        status=status,
        name_prefix=name_prefix,
        limit=limit,
        cursor=cursor,
    )
    return JobsPage(items=[_summary(job) for job in rows], next_cursor=next_cursor)


@router.get("/{name}", response_model=JobPublic, responses=replies(401, 404, 422))
def describe_training_job(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> JobPublic:
    return to_public(service.get(session, name, user, project))


@router.get("/{name}/place-in-line", response_model=PlacePublic, responses=replies(401, 404, 422))
def place_in_line(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> PlacePublic:
    """Where the job stands in the line for its instance type: 1 starts next."""
    place = capacity.place_in_line(session, service.get(session, name, user, project))
    return PlacePublic(
        instance_type=place.instance_type, place=place.place, waiting_count=place.waiting_count
    )


@router.get(
    "/{name}/model",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "model.tar.gz"},
        **replies(401, 404, 422),
    },
)
def download_model(
    name: JobName, session: ReadSessionDep, user: CurrentUser, project: ProjectName = None
) -> StreamingResponse:
    """The job's model (its model.tar.gz), as the artifact store holds it."""
    uri, size = service.stored_model(service.get(session, name, user, project))
    return StreamingResponse(
        storage.read_chunks(uri),
        media_type="application/gzip",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{name}-model.tar.gz"',
        },
    )


@router.post("/{name}/stop", response_model=JobPublic, responses=replies(401, 403, 404, 409, 422))
def stop_training_job(
    name: JobName,
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    project: ProjectName = None,
) -> JobPublic:
    """Stop a running job: its scripts get SIGTERM and a grace period, then it is Stopped."""
    return to_public(service.stop(session, settings, name, user, project))


@router.post(instance_route(Endpoint.STATUS), status_code=204, include_in_schema=False)
def report_instance_status(
    name: JobName,
    host: HostName,
    session: SessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    # After the token: a caller without one learns that first, and no body of theirs is read.
    report: Annotated[protocol.StatusReport, Depends(read_status_report)],
) -> None:
    """Called by the runtime on an instance when its phase changes."""
    job = service.job_for_instance(session, name, host, principal)
    service.record_report(session, settings, job, host, report)


@router.get(
    instance_route(Endpoint.CREDENTIALS),
    response_model=InstanceCredentials,
    response_model_by_alias=True,
    include_in_schema=False,
)
def instance_aws_credentials(
    name: JobName,
    host: HostName,
    session: ReadSessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    response: Response,
) -> InstanceCredentials:
    """Called by the runtime on an instance for the job's AWS credentials, which it serves
    to the job's processes (``service.jobs.instance_credentials``)."""
    job = service.job_for_instance(session, name, host, principal, live=True)
    response.headers["Cache-Control"] = "no-store"  # a secret: no proxy keeps it
    return instance_credentials.for_job(settings, job)


@router.post(
    instance_route(Endpoint.INTERRUPTION),
    response_model=JobPublic,
    responses=replies(401, 403, 404, 409, 422),
    openapi_extra=INTERRUPTION_NOTICE_BODY,
)
def notice_interruption(
    name: JobName,
    host: HostName,
    session: SessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    notice: Annotated[protocol.InterruptionNotice, Depends(read_interruption_notice)],
    project: ProjectName = None,
) -> JobPublic:
    """A spot interruption notice for an instance of a spot job: its scripts get SIGTERM
    and a grace period to checkpoint, then the job waits for capacity and resumes. The
    runtime on EC2 sends it on the two-minute warning; a user token may send it to
    rehearse an interruption on any backend."""
    if principal.kind == "job":
        job = service.job_for_instance(session, name, host, principal, live=True)
    else:
        job = service.get(session, name, principal, project)
        principal.require(Role.MEMBER, job.project, "interrupting a job")
        if host not in service.hosts(job):
            raise NotFound(f"training job {name!r} has no host {host!r}")
    return to_public(service.notice_interruption(session, settings, job, host, notice))


def to_public(job: TrainingJob) -> JobPublic:
    return JobPublic.model_validate(job)


def _summary(job: TrainingJob) -> JobSummary:
    return JobSummary.model_validate(job)
