"""Storing and reading log lines: a page at a time, or a whole log to download
(``service.logs.follow`` streams them as they are stored)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from operator import attrgetter

from sqlalchemy.orm import Session

from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.kit.db import read_pages_in_index_order, session_scope, to_micros
from service.kit.errors import NotFound, SpecError
from service.kit.pagination import decode_cursor, encode_cursor
from service.logs import pages, reading, repository
from service.logs.models import LogChunk
from service.logs.reading import StoredLine
from service.logs.schemas import Line, Packed
from service.settings import Settings


def ingest(session: Session, job_id: str, host: str, lines: list[Line] | Packed) -> int:
    """Store the lines not stored yet (a retried batch repeats seqs); returns how many."""
    repository.hold_host(session, job_id, host)
    last = repository.host_last_seq(session, job_id, host)
    if isinstance(lines, Packed):
        # Numbered on from first_seq, one each: those not stored yet are its last rows.
        skip = max(0, last - lines.first_seq + 1)
        fresh_rows = lines.rows[skip:]
        # A batch stored whole is stored as its body.
        body = lines.body if skip == 0 else None
        repository.insert_packed(session, job_id, host, lines.first_seq + skip, fresh_rows, body)
        return len(fresh_rows)
    fresh = [line for line in lines if line.seq > last]
    repository.insert_lines(session, job_id, host, fresh)
    return len({line.seq for line in fresh})


def hosts_to_read(job: TrainingJob, host: str | None) -> list[str]:
    """The hosts a reader asked for: the job's, or the one named, which must be one of
    them; else a typo in the name would read as a host that printed nothing."""
    hosts = lookup.hosts(job)
    if not host:
        return hosts
    if host not in hosts:
        raise NotFound(
            f"training job {job.name!r} has no host {host!r}; its hosts are {', '.join(hosts)}"
        )
    return [host]


last_seq = repository.last_seq


def has_lines(session: Session, job_id: str, host: str, from_seq: int = 1) -> bool:
    """Whether ``host`` shipped any line numbered ``from_seq`` or later (an attempt's)."""
    return repository.host_last_seq(session, job_id, host) >= from_seq


def page(
    session: Session, job_id: str, *, host: str | None, cursor: str | None, limit: int
) -> tuple[list[StoredLine], str | None]:
    """All hosts merged by time (ties by arrival), up to ``limit`` lines and
    ``pages.PAGE_BYTES`` of them; the cursor is the last (time, id) seen."""
    streams = [LogChunk.job_id == job_id]
    if host:
        # Compared as an expression, so the host's chunks are found by walking the time
        # index, in page order. Where PostgreSQL's statistics predate a job it would take
        # the (host, last_seq) index instead and sort every chunk of the host for a page.
        streams.append(LogChunk.host + "" == host)
    after = None
    if cursor:
        time, line_id = decode_cursor(cursor, int)
        after = (to_micros(time), line_id)
    read_pages_in_index_order(session)
    with closing(reading.by_time(session, tuple(streams), after=after)) as lines:
        rows, more = pages.filled(lines, attrgetter("message"), limit=limit)
    if not more:
        return rows, None
    return rows, encode_cursor(rows[-1].time, rows[-1].id)


# Lines read per query while a download streams (and at most pages.PAGE_BYTES of them):
# each page in a short transaction of its own.
DOWNLOAD_PAGE = 5000


def as_text(
    settings: Settings, job_id: str, host: str | None, *, page_size: int = DOWNLOAD_PAGE
) -> Iterator[bytes]:
    """The job's lines (or ``host``'s) as a text file, a line each: its time in UTC, its
    host and its message. Read a page at a time, so a long log streams in bounded memory."""
    cursor: str | None = None
    while True:
        with session_scope(settings.database_url, readonly=True) as session:
            rows, cursor = page(session, job_id, host=host, cursor=cursor, limit=page_size)
            text = "".join(
                f"{row.time.isoformat().replace('+00:00', 'Z')} {row.host} {row.message}\n"
                for row in rows
            )
        if text:
            yield text.encode()
        if cursor is None:
            return


def parse_position(event_id: str | None, hosts: list[str]) -> dict[str, int]:
    """A follower's position, from the id of the last event it saw (``algo-1:12,algo-2:7``)."""
    position = dict.fromkeys(hosts, 0)
    for part in filter(None, (event_id or "").split(",")):
        host, _, seq = part.partition(":")
        if host not in position or not seq.isdigit():
            raise SpecError(("Last-Event-ID",), "not an event id this server sent", source="header")
        position[host] = int(seq)
    return position
