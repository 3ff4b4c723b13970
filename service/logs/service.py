"""Storing and reading log lines."""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from service.kit.pagination import decode_cursor, encode_cursor
from service.logs.models import LogEvent
from service.logs.schemas import LogLine


def ingest(session: Session, job_id: str, host: str, lines: list[LogLine]) -> int:
    """Store the lines not stored yet (a retried batch repeats seqs); returns how many."""
    last = session.scalar(
        select(func.max(LogEvent.seq)).where(LogEvent.job_id == job_id, LogEvent.host == host)
    )
    fresh = sorted((line for line in lines if line.seq > (last or 0)), key=lambda line: line.seq)
    session.add_all(
        LogEvent(
            job_id=job_id,
            host=host,
            stream=line.stream,
            seq=line.seq,
            time=line.time,
            message=line.message,
        )
        for line in fresh
    )
    session.flush()
    return len(fresh)


def page(
    session: Session, job_id: str, *, host: str | None, cursor: str | None, limit: int
) -> tuple[list[LogEvent], str | None]:
    """All hosts merged by time (ties by arrival); the cursor is the last (time, id) seen."""
    query = select(LogEvent).where(LogEvent.job_id == job_id)
    if host:
        query = query.where(LogEvent.host == host)
    if cursor:
        time, event_id = decode_cursor(cursor, int)
        query = query.where(
            or_(LogEvent.time > time, and_(LogEvent.time == time, LogEvent.id > event_id))
        )
    rows = list(session.scalars(query.order_by(LogEvent.time, LogEvent.id).limit(limit + 1)))
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1].time, rows[-1].id)


def after(
    session: Session, job_id: str, *, host: str | None, after_id: int, limit: int
) -> list[LogEvent]:
    """Lines stored after ``after_id``, in arrival order: what a follower has not seen."""
    query = select(LogEvent).where(LogEvent.job_id == job_id, LogEvent.id > after_id)
    if host:
        query = query.where(LogEvent.host == host)
    return list(session.scalars(query.order_by(LogEvent.id).limit(limit)))
