from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from service.auth.deps import CurrentPrincipal, CurrentUser, credentials_hold
from service.jobs import service as jobs
from service.jobs.routes import HostName, JobName, ProjectName
from service.kit.deps import ReadSessionDep, SessionDep, SettingsDep
from service.kit.errors import replies
from service.kit.text import LookupText
from service.logs import service
from service.logs.schemas import LogBatch, LogEventPublic, LogsPage
from service.metrics import extraction

router = APIRouter(prefix="/v1/training-jobs", tags=["logs"])


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


async def _log_batch(request: Request) -> LogBatch:
    """The body, validated from its JSON text in one pass: for a batch of thousands of
    lines about twice as fast as decoding it first, as FastAPI does with a body model."""
    try:
        return LogBatch.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in errors]
        ) from exc


LogBatchBody = Annotated[LogBatch, Depends(_log_batch)]


@router.post("/{name}/instances/{host}/logs", response_model=Ingested, include_in_schema=False)
def ingest_logs(
    name: JobName,
    host: HostName,
    # Dependencies run in this order: a caller without a token learns that first, and
    # no body of theirs is read.
    principal: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    batch: LogBatchBody,
    after: BackgroundTasks,
) -> Ingested:
    """Called by the runtime on an instance with its next lines. Their metrics are found
    once the answer is sent (``service.metrics.extraction``)."""
    job = jobs.job_for_instance(session, name, host, principal, live=True)
    stored = service.ingest(session, job.id, host, batch.stored())
    if stored and job.spec.get("metric_definitions"):
        after.add_task(extraction.extract_after_answer, settings.database_url, job.id, host)
    return Ingested(stored=stored)
