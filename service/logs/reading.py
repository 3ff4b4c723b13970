"""Reading stored lines back out of their chunks (``service.logs.models``): one host's in
seq order, or the lines of several hosts, of one job or many, merged in time order.

Each reader is a generator that reads chunks a few at a time as it is taken from, so a
page stops reading where it ends: close it (``contextlib.closing``) when it is left
before its end, which closes its query's cursor.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Executable, select
from sqlalchemy.orm import Session

from service.kit.db import from_micros, to_micros
from service.logs.models import CHUNK_LINES, CHUNK_SPAN, LogChunk

# Chunks fetched at a time while a reader goes on (on PostgreSQL through a server-side
# cursor): a page of lines is a chunk or two of a busy host.
READ_CHUNKS = 4


@dataclass(frozen=True, slots=True)
class StoredLine:
    """A line as stored: ``id`` orders lines as they arrived (its chunk's id times
    CHUNK_LINES, plus its place in the chunk)."""

    id: int
    job_id: str
    host: str
    seq: int
    micros: int
    stream: str
    message: str

    @property
    def time(self) -> datetime:
        return from_micros(self.micros)


# A reader's lines, as they are read: close it to stop reading.
Lines = Generator[StoredLine, None, None]

# A time and a line's id: where a reader in time order stands.
Place = tuple[int, int]

_CHUNK = select(
    LogChunk.id,
    LogChunk.job_id,
    LogChunk.host,
    LogChunk.first_seq,
    LogChunk.last_seq,
    LogChunk.first_time,
    LogChunk.last_time,
    LogChunk.lines,
)
# The earliest time a datetime holds, in microseconds: where a read from a time less than
# a chunk's span after it begins.
_EARLIEST = to_micros(datetime.min.replace(tzinfo=UTC))
_SPAN_MICROS = CHUNK_SPAN // timedelta(microseconds=1)


def lines_of(chunk: Any) -> list[StoredLine]:
    """A chunk's lines (a row with _CHUNK's columns), in seq order: its text is a packed
    batch, its rows' times in seconds."""
    base = chunk.id * CHUNK_LINES
    job_id, host, first_seq = chunk.job_id, chunk.host, chunk.first_seq
    return [
        StoredLine(
            base + index, job_id, host, first_seq + index, round(stamp * 1_000_000), stream, message
        )
        for index, (stamp, stream, message) in enumerate(json.loads(chunk.lines)["rows"])
    ]


def by_seq(
    session: Session,
    job_id: str,
    host: str,
    *,
    after: int = 0,
    before: int | None = None,
    descending: bool = False,
    where: tuple[ColumnElement[bool], ...] = (),
) -> Lines:
    """The host's lines numbered after ``after`` and before ``before`` (if given), in seq
    order (``descending``: from the last); ``where`` narrows the chunks read."""
    query = _CHUNK.where(
        LogChunk.job_id == job_id, LogChunk.host == host, LogChunk.last_seq > after, *where
    )
    if before is not None:
        # A chunk's last seq is under its first plus CHUNK_LINES: the index's range ends
        # there, not at the host's last chunk.
        query = query.where(LogChunk.first_seq < before, LogChunk.last_seq < before + CHUNK_LINES)
    query = query.order_by(LogChunk.last_seq.desc() if descending else LogChunk.last_seq)
    with _read(session, query) as chunks:
        for chunk in chunks:
            lines = lines_of(chunk)
            if descending:
                lines.reverse()
            for line in lines:
                if line.seq > after and (before is None or line.seq < before):
                    yield line


def by_time(
    session: Session,
    streams: tuple[ColumnElement[bool], ...],
    *,
    after: Place | None = None,
    start: int | None = None,
    end: int | None = None,
) -> Lines:
    """The lines of the chunks ``streams`` picks (say a job, or some of its hosts) after
    ``after``, at ``start`` or later and before ``end`` (microseconds), in time order,
    equal times as they arrived.

    Chunks are read in the order of their earliest times (then ids) and their lines kept
    in a heap: a line is given once no chunk left to read can hold an earlier one. A chunk
    spans CHUNK_SPAN at most, so one that holds a line after a time begins at most that
    much before it: the read begins there, not at the job's first line."""
    query = _CHUNK.where(*streams)
    low = max((at for at in (after[0] if after else None, start) if at is not None), default=None)
    if low is not None:
        query = query.where(
            LogChunk.first_time >= from_micros(max(low - _SPAN_MICROS, _EARLIEST)),
            LogChunk.last_time >= from_micros(low),
        )
    if end is not None:
        query = query.where(LogChunk.first_time < from_micros(end))
    # In the order of (first_time, id), no line of a chunk comes before its first time and
    # its first line's id, nor of any chunk after it: lines up to there are given.
    query = query.order_by(LogChunk.first_time, LogChunk.id)
    waiting: list[tuple[int, int, StoredLine]] = []
    with _read(session, query) as chunks:
        for chunk in chunks:
            bound = (to_micros(chunk.first_time), chunk.id * CHUNK_LINES)
            while waiting and waiting[0][:2] < bound:
                yield heapq.heappop(waiting)[2]
            if after is not None and _last_place(chunk) <= after:
                continue  # every line of it came before the place: not read out
            for line in lines_of(chunk):
                if (
                    (after is None or (line.micros, line.id) > after)
                    and (start is None or line.micros >= start)
                    and (end is None or line.micros < end)
                ):
                    heapq.heappush(waiting, (line.micros, line.id, line))
    while waiting:
        yield heapq.heappop(waiting)[2]


def _last_place(chunk: Any) -> Place:
    """What no line of ``chunk`` comes after: its latest time, its last line's id."""
    return (to_micros(chunk.last_time), chunk.id * CHUNK_LINES + chunk.last_seq - chunk.first_seq)


@contextmanager
def _read(session: Session, query: Executable) -> Iterator[Any]:
    result = session.execute(query.execution_options(yield_per=READ_CHUNKS))
    try:
        yield result
    finally:
        result.close()


def place_json(place: Place) -> list[Any]:
    """A place as a token holds it: the time in ISO 8601, and the line's id."""
    return [from_micros(place[0]).isoformat(), place[1]]


def place_from_json(given: Any) -> Place | None:
    """A place read back from ``place_json``; None unless it is one."""
    if not isinstance(given, list) or len(given) != 2:
        return None
    at, line_id = given
    if not isinstance(at, str) or type(line_id) is not int:
        return None
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return None
    return None if when.tzinfo is None else (to_micros(when), line_id)
