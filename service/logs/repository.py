"""Storing log lines: a host's run of lines with consecutive seqs as one chunk
(``service.logs.models``), its lines one JSON text, written by one INSERT however many
lines it holds.

A chunk's text is a packed batch as the runtime sends it (``{"rows": [[time in seconds,
stream, message], ...], ...}``): a batch taken whole is stored as the body it came in,
once validated, not written out again. A chunk is cut where a run would hold more than
CHUNK_LINES lines or CHUNK_CHARACTERS of messages, or span more than CHUNK_SPAN: a batch
from the runtime is one chunk, unless its lines waited for the service longer than that.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, func, insert, select
from sqlalchemy.orm import Session

from contract.limits import MAX_LINE
from service.kit.db import from_micros, to_micros
from service.logs.models import (
    CHUNK_CHARACTERS,
    CHUNK_LINES,
    CHUNK_SPAN,
    LogChunk,
    log_chunks,
)
from service.logs.schemas import Line

# A stored line: its time in seconds since the epoch, its stream and its message.
Row = tuple[float, str, str]

_SPAN_SECONDS = CHUNK_SPAN.total_seconds()


def last_seq(session: Session, job_id: str) -> int:
    """The highest line number stored for any host of the job (0 when none): a restarted
    job's instances number their lines on from it."""
    return session.scalar(select(func.max(LogChunk.last_seq)).where(LogChunk.job_id == job_id)) or 0


# Any fixed number: the first key of the advisory locks that hold a host's lines while a
# batch of them is stored (the second is the job and host's hash).
_HOST_LOCK = 0x4C4F4753  # "LOGS"
_HOLD_HOST = select(
    func.pg_advisory_xact_lock(_HOST_LOCK, func.hashtext(bindparam("key", type_=String)))
)


def hold_host(session: Session, job_id: str, host: str) -> None:
    """Hold the host's lines until the transaction ends, so that two batches of one host
    stored at once (a retry while the first is still on its way) store each line once:
    the second reads the host's last line once the first is committed. SQLite lets one
    writer in at a time by itself."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_HOLD_HOST, {"key": f"{job_id}/{host}"})


def host_last_seq(session: Session, job_id: str, host: str) -> int:
    """The host's last line number (0 when none), off the (job, host, last_seq) index."""
    query = (
        select(LogChunk.last_seq)
        .where(LogChunk.job_id == job_id, LogChunk.host == host)
        .order_by(LogChunk.last_seq.desc())
        .limit(1)
    )
    return session.scalar(query) or 0


# A service line, numbered after the job's last line and stored by one statement: built
# once, as building it cost more than running it.
_NUMBERED_LINE = insert(log_chunks).from_select(
    ("job_id", "host", "first_seq", "last_seq", "first_time", "last_time", "lines"),
    select(
        bindparam("job_id", type_=log_chunks.c.job_id.type),
        bindparam("host", type_=log_chunks.c.host.type),
        func.coalesce(func.max(log_chunks.c.last_seq), 0) + 1,
        func.coalesce(func.max(log_chunks.c.last_seq), 0) + 1,
        bindparam("time", type_=log_chunks.c.first_time.type),
        bindparam("time", type_=log_chunks.c.last_time.type),
        bindparam("lines", type_=log_chunks.c.lines.type),
    ).where(log_chunks.c.job_id == bindparam("job_id")),
)


def append_service_line(
    session: Session, job_id: str, host: str, message: str, at: datetime
) -> None:
    """A line of the service's own in the job's log (why it ended, say), after every line
    stored: stored with the job's end, when its instances are gone and can add none. One
    statement numbers and stores it (the number read in the INSERT): a stop in line is
    that many round trips shorter."""
    values = {
        "job_id": job_id,
        "host": host,
        "time": at,
        "lines": _text([(to_micros(at) / 1_000_000, "runtime", message[:MAX_LINE])]),
    }
    session.execute(_NUMBERED_LINE, values)


def insert_lines(session: Session, job_id: str, host: str, lines: Sequence[Line]) -> None:
    """Store ``lines`` of ``host`` (the caller leaves out those stored), in seq order: a
    chunk for each run of consecutive seqs."""
    run: list[Row] = []
    first = previous = 0
    for line in sorted(lines, key=lambda line: line.seq):
        if line.seq == previous:
            continue  # the same line twice in one batch: stored once
        if run and line.seq != previous + 1:
            insert_rows(session, job_id, host, first, run)
            run = []
        if not run:
            first = line.seq
        run.append((line.micros / 1_000_000, line.stream, line.message))
        previous = line.seq
    if run:
        insert_rows(session, job_id, host, first, run)


def insert_packed(
    session: Session,
    job_id: str,
    host: str,
    first_seq: int,
    rows: Sequence[Row],
    body: str | None = None,
) -> None:
    """Store a packed batch's ``rows`` of ``host``, numbered on from ``first_seq``: as
    ``body``, the batch's JSON text they were read from, where given and one chunk holds
    them all."""
    if not rows:
        return
    chunks = list(_chunks(rows))
    if body is not None and len(chunks) == 1:
        _, _, low, high = chunks[0]
        _insert(session, [_values(job_id, host, first_seq, len(rows), low, high, body)])
        return
    _insert_chunks(session, job_id, host, first_seq, chunks)


def insert_rows(session: Session, job_id: str, host: str, first_seq: int, rows: list[Row]) -> None:
    """Store ``rows``, numbered on from ``first_seq``, one each, as the chunks they make."""
    if rows:
        _insert_chunks(session, job_id, host, first_seq, list(_chunks(rows)))


def _insert_chunks(
    session: Session,
    job_id: str,
    host: str,
    first_seq: int,
    chunks: list[tuple[int, Sequence[Row], float, float]],
) -> None:
    _insert(
        session,
        [
            _values(job_id, host, first_seq + start, len(chunk), low, high, _text(chunk))
            for start, chunk, low, high in chunks
        ],
    )


def _values(
    job_id: str, host: str, first_seq: int, lines: int, low: float, high: float, text: str
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "host": host,
        "first_seq": first_seq,
        "last_seq": first_seq + lines - 1,
        "first_time": from_micros(round(low * 1_000_000)),
        "last_time": from_micros(round(high * 1_000_000)),
        "lines": text,
    }


def _insert(session: Session, values: list[dict[str, Any]]) -> None:
    session.execute(insert(log_chunks), values)


def _text(rows: Sequence[Row]) -> str:
    """A chunk's text for ``rows``: a packed batch of them."""
    return json.dumps({"rows": rows}, ensure_ascii=False)


def _chunks(rows: Sequence[Row]) -> Iterator[tuple[int, Sequence[Row], float, float]]:
    """``rows`` cut into chunks: each with where it starts in ``rows``, and its earliest
    and latest times. A batch within every bound (all the runtime sends) is looked at
    three times in C, not a line at a time in Python."""
    low = min(row[0] for row in rows)
    high = max(row[0] for row in rows)
    if (
        len(rows) <= CHUNK_LINES
        and high - low <= _SPAN_SECONDS
        and sum(len(row[2]) for row in rows) <= CHUNK_CHARACTERS
    ):
        yield 0, rows, low, high
        return
    start = 0
    low = high = rows[0][0]
    characters = 0
    for index, row in enumerate(rows):
        stamp, message = row[0], row[2]
        cut = index > start and (
            index - start == CHUNK_LINES
            or characters + len(message) > CHUNK_CHARACTERS
            or max(high, stamp) - min(low, stamp) > _SPAN_SECONDS
        )
        if cut:
            yield start, rows[start:index], low, high
            start, low, high, characters = index, stamp, stamp, 0
        low, high = min(low, stamp), max(high, stamp)
        characters += len(message)
    yield start, rows[start:], low, high
