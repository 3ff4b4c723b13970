from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from contract.protocol import JOBS_PATH, Endpoint, instance_route
from service.auth.deps import CurrentPrincipal, CurrentUser, credentials_hold
from service.jobs import service as jobs
from service.jobs.routes import HostName, JobName, ProjectName
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import replies
from service.kit.protocol import validate_body
from service.kit.text import LookupText
from service.logs import service
from service.logs.schemas import Line, LogBatchBody, LogEventPublic, LogsPage, stored_lines
from service.metrics import extraction

router = APIRouter(prefix=JOBS_PATH, tags=["logs"])


class Ingested(BaseModel):
    stored: int


@router.get("/{name}/logs", response_model=LogsPage, responses=replies(401, 404, 422))
def get_logs(
    request: Request,
    name: JobName,
    session: ReadSessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    host: Annotated[
        LookupText | None, Query(max_length=32, description="Only this host, e.g. algo-1")
    ] = None,
    follow: Annotated[
        bool, Query(description="Stream new lines as server-sent events until the job ends")
    ] = False,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    last_event_id: Annotated[str | None, Header(max_length=4096)] = None,
    project: ProjectName = None,
) -> LogsPage | StreamingResponse:
    """A job's log lines, all hosts merged by time, or one host's."""
    job = jobs.get(session, name, user, project)
    hosts = service.hosts_to_read(job, host)
    if follow:
        position = service.parse_position(last_event_id, hosts)
        return StreamingResponse(
            service.follow(
                settings, job.id, position, functools.partial(credentials_hold, request, settings)
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    rows, next_cursor = service.page(session, job.id, host=host, cursor=cursor, limit=limit)
    return LogsPage(
        events=[LogEventPublic.model_validate(row, from_attributes=True) for row in rows],
        next_cursor=next_cursor,
    )


async def _log_lines(request: Request) -> list[Line]:
    """The body's lines, validated from its JSON text in one pass."""
    return stored_lines(validate_body(LogBatchBody, await request.body()))


LogLines = Annotated[list[Line], Depends(_log_lines)]


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
    job = jobs.job_for_instance(session, name, host, principal, live=True)
    stored = service.ingest(session, job.id, host, lines)
    if stored and job.spec.get("metric_definitions"):
        after.add_task(extraction.extract_after_answer, settings.database_url, job.id, host)
    return Ingested(stored=stored)
