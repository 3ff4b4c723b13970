"""Following a job's log: server-sent events of its lines as they are stored, for many
streams at once without taking the rest of the API's threads or connections.

An API process reads each followed job's new lines once for all the job's streams: one
tail per job (``_Tail``), read every FOLLOW_POLL_SECONDS by one task for all the tails, in
one short session, keeps the job's latest lines (TAIL_BYTES of them) and wakes its streams,
which send them from memory. A stream waiting for lines holds no session, connection or
thread. A stream behind its tail (one that starts from a job's first line, or fell behind)
reads its lines from the database a page at a time, taking turns with the other such
streams (CATCH_UP_READS at once), until it reaches the tail; so does one whose caller's
credentials are read again, once for all the streams of the same credentials.

How many streams a process serves at once is bounded, in all and for each token
(``StreamSlots``); one more is refused with 429 and Retry-After. (200 streams each reading
the database every 250 ms in a thread of its own held another user's request 32.6 s, ran
the connection pool dry, and left 65 of the streams with nothing.)

Each host's lines are numbered by its runtime (``seq``) and arrive in order, one batch at a
time. A stream therefore keeps one position per host, the last seq sent: a row id would not
do, since on PostgreSQL ids are handed out at insert and committed out of order across
hosts, and a stream could skip lines committed late under a lower id.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from service.jobs.models import TrainingJob
from service.jobs.states import TERMINAL
from service.kit.db import session_scope
from service.kit.errors import TooManyRequests
from service.logs import pages
from service.logs.models import LogEvent
from service.logs.schemas import LogEventPublic
from service.settings import Settings

log = logging.getLogger(__name__)

FOLLOW_POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0
# How often a followed stream reads its caller's credentials again.
CREDENTIALS_RECHECK_SECONDS = 5.0
# Lines a read takes at most (and pages.PAGE_BYTES of them).
FOLLOW_BATCH = 1000
# A job's latest lines a tail keeps for its streams (a stream further behind reads the
# database instead), and what all the tails of a process keep together: each keeps its
# share of TAILS_BYTES, TAIL_BYTES at most. A line counts its event's text and what
# Python spends on it besides.
TAIL_BYTES = 1024 * 1024
TAILS_BYTES = 64 * 1024 * 1024
LINE_OVERHEAD = 200
# New lines one poll of the tails reads, of all jobs together; the tails it did not reach
# are read first next time, without waiting.
POLL_BYTES = 8 * 1024 * 1024
# Streams behind their tails (or reading credentials again) reading the database at once:
# the rest wait their turn, holding nothing.
CATCH_UP_READS = 2
# What a refused stream is told to wait before asking again.
RETRY_AFTER_SECONDS = 5


# -- how many streams -----------------------------------------------------------------


class Slot:
    """One stream's place among those a process serves; given back once, however often
    ``release`` is called."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class StreamSlots:
    """The streams a process serves at once: ``most`` in all, ``most_each`` per holder
    (a token)."""

    def __init__(self, most: int, most_each: int) -> None:
        self.most = most
        self.most_each = most_each
        self._lock = threading.Lock()
        self._held: Counter[Hashable] = Counter()

    @property
    def open(self) -> int:
        return self._held.total()

    def take(self, holder: Hashable) -> Slot:
        with self._lock:
            if self._held.total() >= self.most:
                raise TooManyRequests(
                    f"this server streams {self.most} followed logs at once, its most; "
                    "ask again later, or read the log's pages",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            if self._held[holder] >= self.most_each:
                raise TooManyRequests(
                    f"a token may follow {self.most_each} logs at once; close one of its "
                    "streams, or ask again later",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self._held[holder] += 1
        return Slot(functools.partial(self._give_back, holder))

    def _give_back(self, holder: Hashable) -> None:
        with self._lock:
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]


# -- a followed job's latest lines ------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    host: str
    seq: int
    data: str  # the line as its event's data: LogEventPublic's JSON
    size: int  # what it counts for a page (pages.event_bytes)

    @property
    def held(self) -> int:
        """What keeping it costs a tail."""
        return len(self.data) + LINE_OVERHEAD

    @classmethod
    def of(cls, row: LogEvent) -> _Line:
        public = LogEventPublic.model_validate(row, from_attributes=True)
        return cls(row.host, row.seq, public.model_dump_json(), pages.event_bytes(row.message))


class _Tail:
    """A job's latest lines, read once for all its streams: every line of each host after
    ``floor[host]`` up to ``position[host]``, in the order they were read, numbered on
    from ``first``."""

    def __init__(self, job_id: str, hosts: list[str]) -> None:
        self.job_id = job_id
        self.hosts = hosts
        # The last line read of each host; None until the tail is first read.
        self.position: dict[str, int] | None = None
        self.floor: dict[str, int] = {}
        self.lines: list[_Line] = []
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

    def take(self, index: int, position: dict[str, int]) -> tuple[list[_Line], int]:
        """The lines from ``index`` on that a stream at ``position`` has not seen (of its
        hosts), a page of them at most, and the index after them."""
        index = max(index, self.first)
        taken: list[_Line] = []
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

    def extend(self, status: str, lines: list[_Line], *, complete: bool, keep: int) -> None:
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


# -- the tails of a process, read together ----------------------------------------------


@dataclass
class _Check:
    at: float
    result: asyncio.Task[bool]


@dataclass
class _Loop:
    """What the streams of one event loop share."""

    tails: dict[str, _Tail] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    turns: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CATCH_UP_READS))
    checks: dict[str, _Check] = field(default_factory=dict)
    # The tails the last poll did not reach, read first next time.
    behind: list[str] = field(default_factory=list)


class Follows:
    """A process's followed streams: its slots, and per event loop the tails."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = StreamSlots(settings.max_log_streams, settings.max_log_streams_per_token)
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = (
            weakref.WeakKeyDictionary()
        )

    def _here(self) -> _Loop:
        loop = asyncio.get_running_loop()
        if loop not in self._loops:
            self._loops[loop] = _Loop()
        return self._loops[loop]

    async def stream(
        self,
        job_id: str,
        hosts: list[str],
        position: dict[str, int],
        credentials: tuple[str, Callable[[], bool]],
    ) -> AsyncIterator[str]:
        """Server-sent events of a job (whose hosts are ``hosts``): ``log`` for each line
        after ``position`` (a seq per host to read), then one ``end`` once the job has
        ended and every line it stored has been sent. Each event's id resumes the stream
        after it. Every CREDENTIALS_RECHECK_SECONDS the caller's credentials
        (``credentials``: a key for them and how to read them) are read again; once they
        no longer hold (a revoked token, an ended session) the stream stops, and the
        client's reconnection is answered 401."""
        here = self._here()
        tail = self._join(here, job_id, hosts)
        try:
            async for event in self._events(here, tail, position, credentials):
                yield event
        finally:
            tail.streams -= 1
            if tail.streams == 0:
                here.tails.pop(job_id, None)

    async def _events(
        self,
        here: _Loop,
        tail: _Tail,
        position: dict[str, int],
        credentials: tuple[str, Callable[[], bool]],
    ) -> AsyncIterator[str]:
        index: int | None = None
        checked = idle_since = time.monotonic()
        while True:
            if time.monotonic() - checked >= CREDENTIALS_RECHECK_SECONDS:
                if not await self._credentials_hold(here, *credentials):
                    return
                checked = time.monotonic()
            changed = tail.changed  # before looking: a change meanwhile wakes the wait
            if tail.covers(position):
                lines, index = tail.take(tail.first if index is None else index, position)
                if lines:
                    yield _events(lines, position)
                    idle_since = time.monotonic()
                    continue
                if tail.ended:
                    yield _end(tail.status)
                    return
            else:
                index = None
                async with here.turns:
                    status, lines = await run_in_threadpool(
                        _read_behind, self.settings.database_url, tail.job_id, dict(position)
                    )
                if lines:
                    yield _events(lines, position)
                    idle_since = time.monotonic()
                    continue
                if status in TERMINAL:
                    yield _end(status)
                    return
            due = min(checked + CREDENTIALS_RECHECK_SECONDS, idle_since + KEEPALIVE_SECONDS)
            try:
                await asyncio.wait_for(changed.wait(), max(0.0, due - time.monotonic()))
            except TimeoutError:
                if time.monotonic() - idle_since >= KEEPALIVE_SECONDS:
                    idle_since = time.monotonic()
                    yield ": keepalive\n\n"

    def _join(self, here: _Loop, job_id: str, hosts: list[str]) -> _Tail:
        tail = here.tails.get(job_id)
        if tail is None:
            tail = here.tails[job_id] = _Tail(job_id, hosts)
            here.wake.set()
        tail.streams += 1
        if here.reader is None or here.reader.done():
            here.reader = asyncio.create_task(self._read_tails(here))
        return tail

    async def _read_tails(self, here: _Loop) -> None:
        """Read every tail's new lines, together, while there are tails."""
        while here.tails:
            here.wake.clear()
            try:
                await self._read_tails_once(here)
            except Exception:
                # Its streams wait on (a database restarting, say), sending keepalives.
                log.warning("could not read the followed logs", exc_info=True)
                here.behind = []
            if not here.behind:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(here.wake.wait(), FOLLOW_POLL_SECONDS)

    async def _read_tails_once(self, here: _Loop) -> None:
        order = [job_id for job_id in here.behind if job_id in here.tails]
        order += [job_id for job_id in here.tails if job_id not in order]
        tails = [here.tails[job_id] for job_id in order]
        asked = [
            (tail.job_id, tail.hosts, None if tail.position is None else dict(tail.position))
            for tail in tails
        ]
        reads = await run_in_threadpool(_read_tails, self.settings.database_url, asked)
        here.behind = []
        keep = min(TAIL_BYTES, TAILS_BYTES // len(tails))
        for tail, read in zip(tails, reads, strict=True):
            if read is None or not read.complete:
                here.behind.append(tail.job_id)
            if read is None:
                continue
            if read.after is None:
                tail.begin(read.status, read.tips)
            else:
                tail.extend(read.status, read.lines, complete=read.complete, keep=keep)

    async def _credentials_hold(self, here: _Loop, key: str, check: Callable[[], bool]) -> bool:
        """Whether the credentials still hold: read once for all the streams of the
        same credentials each CREDENTIALS_RECHECK_SECONDS."""
        now = time.monotonic()
        kept = here.checks.get(key)
        if kept is None or now - kept.at >= CREDENTIALS_RECHECK_SECONDS:
            stale = now - 2 * CREDENTIALS_RECHECK_SECONDS
            for old in [k for k, c in here.checks.items() if c.at < stale]:
                del here.checks[old]
            kept = here.checks[key] = _Check(now, asyncio.create_task(_check(here, check)))
        return await asyncio.shield(kept.result)


async def _check(here: _Loop, check: Callable[[], bool]) -> bool:
    async with here.turns:
        return await run_in_threadpool(check)


def _events(lines: Sequence[_Line], position: dict[str, int]) -> str:
    """The lines as ``log`` events, each with the position after it as its id; moves
    ``position`` past them."""
    events = []
    for line in lines:
        position[line.host] = line.seq
        events.append(f"id: {format_position(position)}\nevent: log\ndata: {line.data}\n\n")
    return "".join(events)


def _end(status: str) -> str:
    return f"event: end\ndata: {json.dumps({'status': status})}\n\n"


def format_position(position: dict[str, int]) -> str:
    return ",".join(f"{host}:{seq}" for host, seq in position.items() if seq)


# -- reading the database ----------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    status: str
    # Where the read started (None: the tips were read instead).
    after: dict[str, int] | None
    lines: list[_Line] = field(default_factory=list)
    # The first read of a tail: each host's last line so far.
    tips: dict[str, int] = field(default_factory=dict)
    complete: bool = True


def _read_tails(
    url: str, asked: list[tuple[str, list[str], dict[str, int] | None]]
) -> list[_Read | None]:
    """For each tail (a job, its hosts, and where it is, or None to begin it), its job's
    status and the lines after it, a page at most, up to POLL_BYTES in all: None for the
    tails past that."""
    with session_scope(url, readonly=True) as session:
        # Statuses first: lines stored before a job ended are then certain to be read.
        ids = [job_id for job_id, _, _ in asked]
        query = select(TrainingJob.id, TrainingJob.status).where(TrainingJob.id.in_(ids))
        statuses: dict[str, str] = dict(session.execute(query).all())
        reads: list[_Read | None] = []
        used = 0
        for job_id, hosts, after in asked:
            status = statuses.get(job_id, "")
            if after is None:
                reads.append(_Read(status, None, tips=_tips(session, job_id, hosts)))
            elif used >= POLL_BYTES:
                reads.append(None)
            else:
                rows, more = _newer(session, job_id, after)
                lines = [_Line.of(row) for row in rows]
                used += sum(line.size for line in lines)
                reads.append(_Read(status, after, lines, complete=not more))
        return reads


def _tips(session: Session, job_id: str, hosts: list[str]) -> dict[str, int]:
    """Each host's last line of the job (0: none yet), read off the (job, host, seq)
    index."""
    return {
        host: session.scalar(
            select(LogEvent.seq)
            .where(LogEvent.job_id == job_id, LogEvent.host == host)
            .order_by(LogEvent.seq.desc())
            .limit(1)
        )
        or 0
        for host in hosts
    }


def _read_behind(url: str, job_id: str, position: dict[str, int]) -> tuple[str, list[_Line]]:
    """The job's status, then a page of the lines after ``position``."""
    with session_scope(url, readonly=True) as session:
        status = session.scalar(select(TrainingJob.status).where(TrainingJob.id == job_id)) or ""
        rows, _more = _newer(session, job_id, position)
        return status, [_Line.of(row) for row in rows]


def _newer(session: Session, job_id: str, position: dict[str, int]) -> tuple[list[LogEvent], bool]:
    newer = [and_(LogEvent.host == host, LogEvent.seq > seq) for host, seq in position.items()]
    query = (
        select(LogEvent)
        .where(LogEvent.job_id == job_id, or_(*newer))
        # Within a host, time and seq rise together, so any cut keeps each host's prefix.
        .order_by(LogEvent.time, LogEvent.host, LogEvent.seq)
        .limit(FOLLOW_BATCH + 1)
    )
    return pages.read_page(session, query, limit=FOLLOW_BATCH)
