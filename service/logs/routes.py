from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from service.auth.deps import CurrentPrincipal, CurrentUser
from service.jobs import service as jobs
from service.jobs.routes import HostName, JobName
from service.jobs.states import TERMINAL
from service.kit.db import session_scope
from service.kit.deps import SessionDep, SettingsDep
from service.logs import service
from service.logs.schemas import LogBatch, LogEventPublic, LogsPage
from service.settings import Settings

router = APIRouter(prefix="/v1/training-jobs", tags=["logs"])

FOLLOW_POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0


class Ingested(BaseModel):
    stored: int


@router.get("/{name}/logs", response_model=LogsPage)
def get_logs(
    name: JobName,
    session: SessionDep,
    settings: SettingsDep,
    _user: CurrentUser,
    host: Annotated[
        str | None, Query(max_length=32, description="Only this host, e.g. algo-1")
    ] = None,
    follow: Annotated[
        bool, Query(description="Stream new lines as server-sent events until the job ends")
    ] = False,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    last_event_id: Annotated[int | None, Header()] = None,
) -> LogsPage | StreamingResponse:
    """A job's log lines, all hosts merged by time, or one host's."""
    job = jobs.get(session, name)
    if follow:
        stream = _follow(settings, job.id, host, last_event_id or 0)
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    rows, next_cursor = service.page(session, job.id, host=host, cursor=cursor, limit=limit)
    return LogsPage(
        events=[LogEventPublic.model_validate(row, from_attributes=True) for row in rows],
        next_cursor=next_cursor,
    )


async def _follow(
    settings: Settings, job_id: str, host: str | None, after_id: int
) -> AsyncIterator[str]:
    """Server-sent events: ``log`` for each line, then one ``end`` once the job has ended
    and every line it stored has been sent. Resumable with Last-Event-ID."""
    idle = 0.0
    while True:
        status, rows = await run_in_threadpool(_poll, settings, job_id, host, after_id)
        for row in rows:
            after_id = row.id
            yield f"id: {row.id}\nevent: log\ndata: {row.model_dump_json()}\n\n"
        if rows:
            idle = 0.0
            continue
        if status in TERMINAL:
            yield f"event: end\ndata: {json.dumps({'status': status})}\n\n"
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
        idle += FOLLOW_POLL_SECONDS
        if idle >= KEEPALIVE_SECONDS:
            idle = 0.0
            yield ": keepalive\n\n"


def _poll(
    settings: Settings, job_id: str, host: str | None, after_id: int
) -> tuple[str, list[LogEventPublic]]:
    with session_scope(settings.database_url) as session:
        # Status first: lines stored before the job ended are then certain to be read.
        status = jobs.status_of(session, job_id)
        rows = service.after(session, job_id, host=host, after_id=after_id, limit=1000)
        return status, [LogEventPublic.model_validate(row, from_attributes=True) for row in rows]


@router.post("/{name}/instances/{host}/logs", response_model=Ingested, include_in_schema=False)
def ingest_logs(
    name: JobName,
    host: HostName,
    batch: LogBatch,
    session: SessionDep,
    principal: CurrentPrincipal,
) -> Ingested:
    """Called by the runtime on an instance with its next lines."""
    job = jobs.job_for_instance(session, name, host, principal)
    return Ingested(stored=service.ingest(session, job.id, host, batch.lines))
