"""A followed job's latest lines, read once for all its streams in an API process (one
``Tail`` per job), and the reads of the database that fill tails and the streams behind
them.

Each host's lines are numbered by its runtime (``seq``) and arrive in order, one batch at a
time. A stream therefore keeps one position per host, the last seq sent: a row id would not
do, since on PostgreSQL ids are handed out at insert and committed out of order across
hosts, and a stream could skip lines committed late under a lower id.
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass, field
from operator import attrgetter

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.jobs.models import TrainingJob
from service.jobs.states import TERMINAL
from service.kit.db import session_scope
from service.logs import pages, reading, repository
from service.logs.reading import StoredLine
from service.logs.schemas import LogEventPublic

# Lines a read takes at most (and pages.PAGE_BYTES of them).
FOLLOW_BATCH = 1000
# New lines one read of the tails takes, of all jobs together; the tails it did not reach
# are read first next time.
POLL_BYTES = 8 * 1024 * 1024
# What a line held by a tail costs besides its event's text.
LINE_OVERHEAD = 200


@dataclass(frozen=True)
class Line:
    host: str
    seq: int
    data: str  # the line as its event's data: LogEventPublic's JSON
    size: int  # what it counts for a page (pages.event_bytes)

    @property
    def held(self) -> int:
        """What keeping it costs a tail."""
        return len(self.data) + LINE_OVERHEAD

    @classmethod
    def of(cls, row: StoredLine) -> Line:
        public = LogEventPublic.model_validate(row, from_attributes=True)
        return cls(row.host, row.seq, public.model_dump_json(), pages.event_bytes(row.message))


class Tail:
    """A job's latest lines, read once for all its streams: every line of each host after
    ``floor[host]`` up to ``position[host]``, in the order they were read, numbered on
    from ``first``."""

    def __init__(self, job_id: str, hosts: list[str]) -> None:
        self.job_id = job_id
        self.hosts = hosts
        # The last line read of each host; None until the tail is first read.
        self.position: dict[str, int] | None = None
        self.floor: dict[str, int] = {}
        self.lines: list[Line] = []
        self.first = 0
        self._start = 0  # lines[_start:] are held; the rest are let go
        self.held = 0
        self.status = ""
        self.ended = False
        self.changed = asyncio.Event()
        self.streams = 0

    def covers(self, position: dict[str, int]) -> bool:
        """Whether every line a stream at ``position`` has not seen is here."""
        if self.position is None:
            return False
        return all(seq >= self.floor.get(host, 0) for host, seq in position.items())

    def take(self, index: int, position: dict[str, int]) -> tuple[list[Line], int]:
        """The lines from ``index`` on that a stream at ``position`` has not seen (of its
        hosts), a page of them at most, and the index after them."""
        index = max(index, self.first)
        taken: list[Line] = []
        used = 0
        while index - self.first < len(self.lines) - self._start:
            line = self.lines[self._start + index - self.first]
            if line.host in position and line.seq > position[line.host]:
                if taken and used + line.size > pages.PAGE_BYTES:
                    break
                taken.append(line)
                used += line.size
            index += 1
        return taken, index

    def begin(self, status: str, tips: dict[str, int]) -> None:
        """The first read: the job's status, then each host's last line so far."""
        self.position = dict(tips)
        self.floor = dict(tips)
        self.status, self.ended = status, status in TERMINAL
        self._wake()

    def extend(self, status: str, lines: list[Line], *, complete: bool, keep: int) -> None:
        """The job's status, then the lines read after ``position`` (``complete``: every
        line stored was read); the oldest are let go beyond ``keep`` bytes."""
        assert self.position is not None  # begun
        self.lines.extend(lines)
        for line in lines:
            self.position[line.host] = line.seq
            self.held += line.held
        while self.held > keep and self._start < len(self.lines):
            gone = self.lines[self._start]
            self.floor[gone.host] = gone.seq
            self.held -= gone.held
            self._start += 1
            self.first += 1
        if self._start > len(self.lines) // 2:
            del self.lines[: self._start]
            self._start = 0
        # The status was read before the lines: once it is terminal and every line after
        # it was read, the job's log is whole.
        ended = complete and status in TERMINAL
        if lines or ended != self.ended:
            self.status, self.ended = status, ended
            self._wake()

    def _wake(self) -> None:
        woken, self.changed = self.changed, asyncio.Event()
        woken.set()


@dataclass(frozen=True)
class Read:
    status: str
    # Where the read started (None: the tips were read instead).
    after: dict[str, int] | None
    lines: list[Line] = field(default_factory=list)
    # The first read of a tail: each host's last line so far.
    tips: dict[str, int] = field(default_factory=dict)
    complete: bool = True


def read_tails(
    url: str, asked: list[tuple[str, list[str], dict[str, int] | None]]
) -> list[Read | None]:
    """For each tail (a job, its hosts, and where it is, or None to begin it), its job's
    status and the lines after it, a page at most, up to POLL_BYTES in all: None for the
    tails past that."""
    with session_scope(url, readonly=True) as session:
        # Statuses first: lines stored before a job ended are then certain to be read.
        ids = [job_id for job_id, _, _ in asked]
        query = select(TrainingJob.id, TrainingJob.status).where(TrainingJob.id.in_(ids))
        statuses: dict[str, str] = dict(session.execute(query).all())
        reads: list[Read | None] = []
        used = 0
        for job_id, hosts, after in asked:
            status = statuses.get(job_id, "")
            if after is None:
                reads.append(Read(status, None, tips=_tips(session, job_id, hosts)))
            elif used >= POLL_BYTES:
                reads.append(None)
            else:
                rows, more = _newer(session, job_id, after)
                lines = [Line.of(row) for row in rows]
                used += sum(line.size for line in lines)
                reads.append(Read(status, after, lines, complete=not more))
        return reads


def _tips(session: Session, job_id: str, hosts: list[str]) -> dict[str, int]:
    """Each host's last line of the job (0: none yet)."""
    return {host: repository.host_last_seq(session, job_id, host) for host in hosts}


def read_behind(url: str, job_id: str, position: dict[str, int]) -> tuple[str, list[Line]]:
    """The job's status, then a page of the lines after ``position``."""
    with session_scope(url, readonly=True) as session:
        status = session.scalar(select(TrainingJob.status).where(TrainingJob.id == job_id)) or ""
        rows, _more = _newer(session, job_id, position)
        return status, [Line.of(row) for row in rows]


def _newer(
    session: Session, job_id: str, position: dict[str, int]
) -> tuple[list[StoredLine], bool]:
    hosts = [reading.by_seq(session, job_id, host, after=seq) for host, seq in position.items()]
    # Each host's lines in seq order, merged by time: any cut keeps each host's prefix.
    merged = heapq.merge(*hosts, key=attrgetter("micros"))
    try:
        return pages.filled(merged, attrgetter("message"), limit=FOLLOW_BATCH)
    finally:
        for lines in hosts:
            lines.close()
