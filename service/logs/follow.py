"""Following a job's log: server-sent events of its lines as they are stored, for many
streams at once without taking the rest of the API's threads or connections.

An API process reads each followed job's new lines once for all the job's streams: one
tail per job (``Tail``), read every FOLLOW_POLL_SECONDS by one task for all the tails, in
one short session, keeps the job's latest lines (TAIL_BYTES of them) and wakes its streams,
which send them from memory. A stream waiting for lines holds no session, connection or
thread. A stream behind its tail (one that starts from a job's first line, or fell behind)
reads its lines from the database a page at a time, taking turns with the other such
streams (CATCH_UP_READS at once), until it reaches the tail; so does one whose caller's
credentials are read again, once for all the streams of the same credentials.

How many streams a process serves at once is bounded, in all and for each token
(``service.logs.stream_slots``); one more is refused with 429 and Retry-After. (200
streams each reading the database every 250 ms in a thread of its own held another user's
request 32.6 s, ran the connection pool dry, and left 65 of the streams with nothing.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool

from service.jobs.states import TERMINAL
from service.logs.stream_slots import StreamSlots
from service.logs.tail import Line, Tail, read_behind, read_tails
from service.settings import Settings

log = logging.getLogger(__name__)

FOLLOW_POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0
# How often a followed stream reads its caller's credentials again.
CREDENTIALS_RECHECK_SECONDS = 5.0
# A job's latest lines a tail keeps for its streams (a stream further behind reads the
# database instead), and what all the tails of a process keep together: each keeps its
# share of TAILS_BYTES, TAIL_BYTES at most.
TAIL_BYTES = 1024 * 1024
TAILS_BYTES = 64 * 1024 * 1024
# Streams behind their tails (or reading credentials again) reading the database at once:
# the rest wait their turn, holding nothing.
CATCH_UP_READS = 2


@dataclass
class _Check:
    at: float
    result: asyncio.Task[bool]


@dataclass
class _Loop:
    """What the streams of one event loop share."""

    tails: dict[str, Tail] = field(default_factory=dict)
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
        tail: Tail,
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
                    yield _log_events(lines, position)
                    idle_since = time.monotonic()
                    continue
                if tail.ended:
                    yield _end(tail.status)
                    return
            else:
                index = None
                async with here.turns:
                    status, lines = await run_in_threadpool(
                        read_behind, self.settings.database_url, tail.job_id, dict(position)
                    )
                if lines:
                    yield _log_events(lines, position)
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

    def _join(self, here: _Loop, job_id: str, hosts: list[str]) -> Tail:
        tail = here.tails.get(job_id)
        if tail is None:
            tail = here.tails[job_id] = Tail(job_id, hosts)
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
        reads = await run_in_threadpool(read_tails, self.settings.database_url, asked)
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
            kept = here.checks[key] = _Check(
                now, asyncio.create_task(_read_credentials(here, check))
            )
        return await asyncio.shield(kept.result)


async def _read_credentials(here: _Loop, check: Callable[[], bool]) -> bool:
    async with here.turns:
        return await run_in_threadpool(check)


def _log_events(lines: Sequence[Line], position: dict[str, int]) -> str:
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
