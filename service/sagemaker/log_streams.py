"""The log group's streams, and its lines across streams, read a bounded amount a request.

There is no table of streams: a stream is a host of a job that has printed a line. A page
of streams walks the project's jobs off an index (by name, or by creation for
LastEventTime), takes each job's hosts from its instance count (read out of the record by
the database, as lists do) and asks the chunks' (job, host, last_seq) index for each host's
first and last chunk: a point lookup a stream. Lines across streams are read a job at a
time, in the order of the jobs' names, each job's in time order, then as they arrived. Both
stop at a budget of jobs, streams or lines looked at, whatever the project holds, and give
back where to go on from; a page may then be short, or empty, with a place to go on from,
as CloudWatch's are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Row, and_, literal, select, union_all
from sqlalchemy.orm import Session

from contract.hosts import host_names
from service.jobs.models import TrainingJob, record_field
from service.kit import keyset
from service.kit.db import read_pages_in_index_order
from service.logs import pages, reading
from service.logs.models import LogChunk
from service.logs.reading import StoredLine

# The most jobs one request looks at, and the most streams (point lookups) a page of
# streams asks about: a project of jobs that printed nothing still costs one page this.
JOBS_LOOKED_AT = 100
STREAMS_LOOKED_AT = 200
# The most lines FilterLogEvents looks at across streams in one request, matching or not.
LINES_LOOKED_AT = 10_000


class StreamJob(Protocol):
    """A job whose hosts are streams: the job itself, or a row of these columns."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


@dataclass(frozen=True)
class Stream:
    job: StreamJob
    host: str
    first: datetime
    last: datetime
    lines: int

    @property
    def name(self) -> str:
        return stream_name(self.job, self.host)


def stream_name(job: StreamJob, host: str) -> str:
    return f"{job.name}/{host}-{int(job.created_at.timestamp())}"


# -- pages of streams ----------------------------------------------------------------------

# A stream's place in a listing: its job's keys in the listing's order, then its host. As
# JSON: by name [name, host]; by creation [created_at, id, host].
Place = list[Any]


def _job_keys(*, by_creation: bool, descending: bool) -> tuple[keyset.Key, ...]:
    if by_creation:
        return (
            keyset.Key(TrainingJob.created_at, descending),
            keyset.Key(TrainingJob.id, descending),
        )
    # A name is unique in its project (uq_training_jobs_project_name is the index walked).
    return (keyset.Key(TrainingJob.name, descending),)


def place_parser(*, by_creation: bool, descending: bool) -> Callable[[Any], Place | None]:
    """Reads a stream's place back from JSON; None unless it is one of this listing's."""
    keys = _job_keys(by_creation=by_creation, descending=descending)

    def parse(given: Any) -> Place | None:
        if not isinstance(given, list) or len(given) != len(keys) + 1:
            return None
        host = given[-1]
        job = keyset.from_json(keys, given[:-1])
        return None if job is None or not isinstance(host, str) else [*job, host]

    return parse


def page(
    session: Session,
    project: str,
    prefix: str,
    *,
    by_creation: bool,
    descending: bool,
    limit: int,
    after: Place | None,
) -> tuple[list[Stream], Place | None]:
    """Up to ``limit`` of the project's streams whose name starts with ``prefix``, after
    ``after``; and the place to go on from (None once no stream can remain)."""
    keys = _job_keys(by_creation=by_creation, descending=descending)
    jobs = _jobs(session, project, prefix, keys, after=None if after is None else after[:-1])
    looked_at = jobs[:JOBS_LOOKED_AT]
    candidates = [
        (job, host)
        for job in looked_at
        # A job's streams in the order of their names (algo-1-..., algo-10-..., algo-2-...).
        for host in sorted(host_names(job.instance_count), key=_host_key, reverse=descending)
        if stream_name(job, host).startswith(prefix)
        and (after is None or _beyond(job, host, keys, after, descending=descending))
    ]
    looked = candidates[:STREAMS_LOOKED_AT]
    remains = len(candidates) > len(looked) or len(jobs) > len(looked_at)
    found: list[Stream] = []
    last: tuple[Any, str] | None = None
    for chunk in _chunks(looked, limit + 1):
        for (job, host), stream in zip(chunk, _described(session, chunk), strict=True):
            if stream is not None:
                if len(found) == limit:  # another stream: the next page starts with it
                    return found, _place(*last, keys) if last else None
                found.append(stream)
            last = (job, host)
        if len(found) == limit:
            break
    if last is not None and (remains or last != looked[-1]):
        return found, _place(*last, keys)
    if last is None and remains and looked_at:
        # Every job looked at was done with: go on after the last one's every host.
        return found, _place(looked_at[-1], "" if descending else "~", keys)
    return found, None


def _host_key(host: str) -> str:
    # As its stream's name sorts: "algo-1-<epoch>" before "algo-10-<epoch>".
    return host + "-"


def _place(job: Any, host: str, keys: Sequence[keyset.Key]) -> Place:
    return [*(getattr(job, key.column.key) for key in keys), host]


def _beyond(
    job: Any, host: str, keys: Sequence[keyset.Key], after: Place, *, descending: bool
) -> bool:
    """Whether the stream comes after ``after`` (the database gave only jobs from the
    token's one on)."""
    if _place(job, host, keys)[:-1] != after[:-1]:
        return True
    mine, theirs = _host_key(host), _host_key(after[-1])
    return mine < theirs if descending else mine > theirs


def _jobs(
    session: Session, project: str, prefix: str, keys: Sequence[keyset.Key], *, after: Place | None
) -> Sequence[Row[Any]]:
    """The jobs whose streams may start with ``prefix``, from the job at ``after`` on, in
    ``keys``' order: one more than are looked at, to know whether more remain."""
    job_prefix, slash, _ = prefix.partition("/")
    query = select(
        TrainingJob.id,
        TrainingJob.name,
        TrainingJob.project,
        TrainingJob.created_at,
        record_field("instance_count").as_integer().label("instance_count"),
    ).where(TrainingJob.project == project)
    if slash:
        query = query.where(TrainingJob.name == job_prefix)
    elif job_prefix:
        query = query.where(TrainingJob.name.startswith(job_prefix, autoescape=True))
    if after is not None:
        query = query.where(_from(keys, after))
    read_pages_in_index_order(session)
    ordered = query.order_by(*keyset.ordering(keys)).limit(JOBS_LOOKED_AT + 1)
    return session.execute(ordered).all()


def _from(keys: Sequence[keyset.Key], place: Sequence[Any]) -> Any:
    """The job at ``place`` and those after it: its later hosts are still to come."""
    level = and_(*(key.level(value) for key, value in zip(keys, place, strict=True)))
    return keyset.after(keys, place) | level


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _described(session: Session, chunk: list[tuple[Any, str]]) -> list[Stream | None]:
    """Each host's stream (its first and last chunk, through the (job, host, last_seq)
    index), or None for a host that printed nothing: one statement, a point lookup a
    host."""
    if not chunk:
        return []

    def edge(job_id: str, host: str, column: Any, *, last: bool) -> Any:
        return (
            select(column)
            .where(LogChunk.job_id == job_id, LogChunk.host == host)
            .order_by(LogChunk.last_seq.desc() if last else LogChunk.last_seq)
            .limit(1)
            .scalar_subquery()
        )

    each = [
        select(
            literal(n).label("n"),
            edge(job.id, host, LogChunk.first_time, last=False).label("first"),
            edge(job.id, host, LogChunk.last_time, last=True).label("last"),
            edge(job.id, host, LogChunk.last_seq, last=True).label("lines"),
        )
        for n, (job, host) in enumerate(chunk)
    ]
    rows = {row.n: row for row in session.execute(union_all(*each))}
    described: list[Stream | None] = []
    for n, (job, host) in enumerate(chunk):
        row = rows[n]
        if row.first is None:
            described.append(None)
            continue
        described.append(
            Stream(job=job, host=host, first=row.first, last=row.last, lines=row.lines)
        )
    return described


# -- lines across streams -------------------------------------------------------------------

# Where a walk of lines stands: the job's name, and the last line looked at in it ([time,
# id]), or None once the job was looked at to its end.


def line_place(given: Any) -> list[Any] | None:
    """A walk's place read back from JSON ([name, [time, id] | None]); None unless one."""
    if not isinstance(given, list) or len(given) != 2 or not isinstance(given[0], str):
        return None
    if given[1] is None:
        return [given[0], None]
    line = reading.place_from_json(given[1])
    return None if line is None else [given[0], line]


def line_place_json(place: list[Any]) -> list[Any]:
    return [place[0], None if place[1] is None else reading.place_json(place[1])]


@dataclass
class Walk:
    """What a walk of lines across streams found: the page, the streams it looked in (and
    whether to their end), and where to go on from (None: nothing remains)."""

    events: list[tuple[StreamJob, StoredLine]]
    searched: dict[str, bool]
    after: list[Any] | None


def walk_lines(
    session: Session,
    project: str,
    prefix: str,
    *,
    terms: list[str],
    start: int | None,
    end: int | None,
    limit: int,
    after: list[Any] | None,
) -> Walk:
    """Up to ``limit`` lines (and PAGE_BYTES of events) holding every term, at ``start``
    or later and before ``end`` (microseconds), of the project's streams whose name
    starts with ``prefix``: a job at a time in name order, each job's lines in (time,
    arrival) order, from ``after`` on. Looks at no more than JOBS_LOOKED_AT jobs and
    LINES_LOOKED_AT lines."""
    job_prefix, slash, _ = prefix.partition("/")
    jobs_query = select(
        TrainingJob.id, TrainingJob.name, TrainingJob.project, TrainingJob.created_at
    ).where(TrainingJob.project == project)
    if slash:
        jobs_query = jobs_query.where(TrainingJob.name == job_prefix)
    elif job_prefix:
        jobs_query = jobs_query.where(TrainingJob.name.startswith(job_prefix, autoescape=True))
    if after is not None:
        resume = TrainingJob.name > after[0]
        if after[1] is not None:
            resume = resume | (TrainingJob.name == after[0])
        jobs_query = jobs_query.where(resume)
    read_pages_in_index_order(session)
    jobs = session.execute(jobs_query.order_by(TrainingJob.name).limit(JOBS_LOOKED_AT + 1)).all()
    walk = Walk(events=[], searched={}, after=None)
    used = 0
    lines_left = LINES_LOOKED_AT
    for job in jobs[:JOBS_LOOKED_AT]:
        if lines_left == 0:
            walk.after = _job_done(jobs, job)
            return walk
        place = after[1] if after is not None and after[0] == job.name else None
        lines = reading.by_time(
            session, (LogChunk.job_id == job.id,), after=place, start=start, end=end
        )
        with closing(lines):
            for line in lines:
                if lines_left == 0:  # one line more than the budget: the job goes on
                    walk.after = _here(jobs, job, place, after)
                    return walk
                name = stream_name(job, line.host)
                walk.searched.setdefault(name, False)
                if name.startswith(prefix) and all(term in line.message for term in terms):
                    size = pages.event_bytes(line.message)
                    full = len(walk.events) == limit
                    if full or (walk.events and used + size > pages.PAGE_BYTES):
                        walk.after = _here(jobs, job, place, after)
                        return walk
                    walk.events.append((job, line))
                    used += size
                lines_left -= 1
                place = (line.micros, line.id)
        for name in walk.searched:
            if name.startswith(job.name + "/"):
                walk.searched[name] = True
    if len(jobs) > JOBS_LOOKED_AT:
        walk.after = [jobs[JOBS_LOOKED_AT - 1].name, None]
    return walk


def _here(
    jobs: Sequence[Any], job: Any, place: reading.Place | None, after: list[Any] | None
) -> list[Any] | None:
    """The place a walk stopped at in ``job``: after its line at ``place``, or before it."""
    if place is not None:
        return [job.name, place]
    return _job_done(jobs, job) or after


def _job_done(jobs: Sequence[Any], job: Any) -> list[Any] | None:
    """The place before ``job``: after the job before it (to its end), or from the start."""
    before = jobs.index(job) - 1
    return [jobs[before].name, None] if before >= 0 else None
