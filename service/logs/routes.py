from __future__ import annotations

import functools
import weakref
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from contract.protocol import JOBS_PATH
from service.auth.deps import CurrentUser, credentials_hold, credentials_key
from service.jobs import lookup
from service.jobs.params import JobName, ProjectName
from service.kit.deps import ReadSessionDep, SettingsDep
from service.kit.errors import replies
from service.kit.text import LookupText
from service.logs import service
from service.logs.follow import Follows
from service.logs.schemas import LogEventPublic, LogsPage
from service.logs.stream_slots import Slot

router = APIRouter(prefix=JOBS_PATH, tags=["logs"])


class FollowedLog(StreamingResponse):
    """A followed log's events, which give back the stream's slot once they end, however
    they end (the job's end, the client gone, the server stopping)."""

    def __init__(self, events: AsyncIterator[str], slot: Slot) -> None:
        super().__init__(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
        self._slot = slot
        # Should it never be sent, it gives the slot back once it is let go.
        weakref.finalize(self, slot.release)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


@router.get("/{name}/logs", response_model=LogsPage, responses=replies(401, 404, 422, 429))
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
    """A job's log lines, all hosts merged by time, or one host's: a page of at most
    ``limit`` lines and 1 MB, or with ``follow`` a stream of them (429 with Retry-After
    while the server, or the caller's token, holds as many streams as it may)."""
    job = lookup.get(session, name, user, project)
    hosts = service.hosts_to_read(job, host)
    if follow:
        position = service.parse_position(last_event_id, hosts)
        follows: Follows = request.app.state.follows
        slot = follows.slots.take(user.token_id if user.token_id is not None else user.name)
        check = functools.partial(credentials_hold, request, settings)
        events = follows.stream(
            job.id, lookup.hosts(job), position, (credentials_key(request), check)
        )
        return FollowedLog(events, slot)
    rows, next_cursor = service.page(session, job.id, host=host, cursor=cursor, limit=limit)
    return LogsPage(
        events=[LogEventPublic.model_validate(row, from_attributes=True) for row in rows],
        next_cursor=next_cursor,
    )


@router.get(
    "/{name}/logs/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {}}, "description": "the log as a text file"},
        **replies(401, 404, 422),
    },
)
def download_logs(
    name: JobName,
    session: ReadSessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    host: Annotated[
        LookupText | None, Query(max_length=32, description="Only this host, e.g. algo-1")
    ] = None,
    project: ProjectName = None,
) -> StreamingResponse:
    """A job's whole log (every host's lines merged by time, or one host's) as a text
    file: each line its time in UTC, its host and its message."""
    job = lookup.get(session, name, user, project)
    service.hosts_to_read(job, host)
    filename = f"{job.name}-{host}.log" if host else f"{job.name}.log"
    return StreamingResponse(
        service.as_text(settings, job.id, host),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
