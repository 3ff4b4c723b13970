"""The routes an instance's runtime calls (``contract.protocol``): its phase reports, its
log lines, its own metrics, its AWS credentials, and spot interruption notices. Each takes
the instance's own token, which names one job and one host; an interruption may also come
from a user rehearsing one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Request, Response
from pydantic import BaseModel

from contract import protocol
from contract.protocol import JOBS_PATH, Endpoint, instance_route
from service.auth.access import Role
from service.auth.deps import CurrentPrincipal
from service.grants import service as grants
from service.jobs import lookup
from service.jobs.params import HostName, JobName, ProjectName
from service.jobs.schemas import JobPublic
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import NotFound, replies
from service.logs import service as logs
from service.logs.schemas import Line, Packed, received_lines
from service.metrics import extraction, instance
from service.observability import instruments
from service.training import instance_credentials, service
from service.training.instance_credentials import InstanceCredentials
from service.training.instance_messages import (
    INTERRUPTION_NOTICE_BODY,
    read_interruption_notice,
    read_status_report,
)
from service.training.routes import to_public

router = APIRouter(prefix=JOBS_PATH, tags=["training jobs"])


class Ingested(BaseModel):
    stored: int


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
    job = lookup.job_for_instance(session, name, host, principal)
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
    to the job's processes (``service.training.instance_credentials``)."""
    job = lookup.job_for_instance(session, name, host, principal, live=True)
    response.headers["Cache-Control"] = "no-store"  # a secret: no proxy keeps it
    places = grants.places(session, settings, job.project)  # as granted now
    return instance_credentials.for_job(settings, job, places)


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
        job = lookup.job_for_instance(session, name, host, principal, live=True)
    else:
        job = lookup.get(session, name, principal, project)
        principal.require(Role.MEMBER, job.project, "interrupting a job")
        if host not in lookup.hosts(job):
            raise NotFound(f"training job {name!r} has no host {host!r}")
    return to_public(service.notice_interruption(session, settings, job, host, notice), principal)


async def _log_lines(request: Request) -> list[Line] | Packed:
    """The body's lines, validated from its JSON text in one pass."""
    return received_lines(await request.body())


LogLines = Annotated[list[Line] | Packed, Depends(_log_lines)]


@router.post(instance_route(Endpoint.LOGS), response_model=Ingested, include_in_schema=False)
def ingest_logs(
    name: JobName,
    host: HostName,
    # Dependencies run in this order: a caller without a token learns that first, and
    # no body of theirs is read.
    principal: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    lines: LogLines,
    after: BackgroundTasks,
) -> Ingested:
    """Called by the runtime on an instance with its next lines. Their metrics are found
    once the answer is sent (``service.metrics.extraction``)."""
    job = lookup.job_for_instance(session, name, host, principal, live=True)
    stored = logs.ingest(session, job.id, host, lines)
    instruments.LOG_BATCHES.inc()
    instruments.LOG_LINES.inc(stored)
    if stored and job.record.metric_definitions:
        after.add_task(extraction.extract_after_answer, settings.database_url, job.id, host)
    return Ingested(stored=stored)


@router.post(instance_route(Endpoint.METRICS), response_model=Ingested, include_in_schema=False)
def ingest_instance_metrics(
    name: JobName,
    host: HostName,
    # A caller without a token learns that first, and no body of theirs is read.
    principal: CurrentPrincipal,
    session: SessionDep,
    samples: Annotated[protocol.InstanceMetrics, Depends(instance.read_instance_metrics)],
) -> Ingested:
    """Called by the runtime on an instance with its latest utilisation samples."""
    job = lookup.job_for_instance(session, name, host, principal, live=True)
    return Ingested(stored=instance.store(session, job, host, samples))
