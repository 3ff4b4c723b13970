"""When a job's log lines are searched for its metrics, and how much that may cost.

Never while a request waits: an instance's log batch is stored and answered, and its
lines are searched after the answer is sent (a background task of the request, in the
API process). The worker searches whatever is left before it ends a job, so the final
metrics are whole even where an API process died between the two.

Each host has a cursor (``MetricCursor``): the last line whose points are stored. A search
reads the lines after it and searches them holding no transaction (SQLite's write lock
included), then stores their points and moves the cursor in one transaction, only if no
other process moved it meanwhile; so no line is searched into points twice, and a retried
batch, whose lines are not stored again, is searched once.

The work is bounded. RE2 searches in time linear in the line and in the pattern's
program, which is bounded at submission (``service.kit.patterns.MAX_METRIC_PROGRAM``), so
one search of one line is short (at most about 35 ms for a 16 KiB line here, for a
pattern that keeps RE2 off its DFA). A round of at most ``ROUND_LINES`` lines stops once
it has cost ``CPU_BUDGET_SECONDS`` of the thread's CPU, looked at after each search; RE2
releases the GIL while it searches, so the API's other requests go on meanwhile. A host
whose lines cost that much is searched no further: the cursor says why, and so does the
job's log when it ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from contract.limits import MAX_LOG_BATCH
from service.jobs.models import MetricCursor, TrainingJob
from service.kit.db import session_scope, to_micros
from service.logs.models import LogEvent
from service.logs.schemas import Line
from service.metrics import service

log = logging.getLogger(__name__)

ROUND_LINES = MAX_LOG_BATCH
# A round of a batch's lines with every definition costs far less: 5,000 lines of 80
# characters and 40 definitions take about 0.1 s.
CPU_BUDGET_SECONDS = 2.0

# One search per host at a time in this process: two batches' searches would read the
# same lines, and one of them would find its work done by the other.
_searching: dict[tuple[str, str], threading.Lock] = {}
_searching_lock = threading.Lock()


def extract_pending(
    database_url: str, job_id: str, host: str, cpu_budget: float = CPU_BUDGET_SECONDS
) -> None:
    """Search the host's lines after its cursor, round by round, until none is left;
    each round may cost ``cpu_budget`` seconds of CPU."""
    with _one_search(job_id, host):
        while _round(database_url, job_id, host, cpu_budget):
            pass


def stopped_hosts(session: Session, job_id: str) -> dict[str, str]:
    """The hosts whose lines were left unsearched, and why."""
    rows = session.execute(
        select(MetricCursor.host, MetricCursor.stopped).where(
            MetricCursor.job_id == job_id, MetricCursor.stopped.is_not(None)
        )
    )
    return {host: str(why) for host, why in rows}


@contextmanager
def _one_search(job_id: str, host: str) -> Iterator[None]:
    key = (job_id, host)
    with _searching_lock:
        lock = _searching.setdefault(key, threading.Lock())
    try:
        with lock:
            yield
    finally:
        with _searching_lock:
            if not lock.locked():
                _searching.pop(key, None)


def _round(
    database_url: str, job_id: str, host: str, cpu_budget: float = CPU_BUDGET_SECONDS
) -> bool:
    """One round; whether lines may be left after it."""
    with session_scope(database_url, readonly=True) as session:
        job = session.get(TrainingJob, job_id)
        if job is None or not job.spec.get("metric_definitions"):
            return False
        cursor = session.get(MetricCursor, (job_id, host))
        if cursor is not None and cursor.stopped:
            return False
        start = cursor.seq if cursor is not None else 0
        defined = service.definitions(job.spec)
        lines = _lines_after(session, job_id, host, start)
    if not lines:
        return False
    found = service.find(job_id, host, defined, lines, cpu_budget)
    try:
        with session_scope(database_url) as session:
            cursor = _locked_cursor(session, job_id, host)
            if cursor.seq != start:
                return True  # another process searched these lines meanwhile: look again
            service.store(session, found.points)
            cursor.seq = found.last_seq
            if found.over_budget:
                cursor.stopped = (
                    f"Metrics were not searched for after line {found.last_seq} of {host}: "
                    "its lines cost the metric definitions' patterns more than "
                    f"{cpu_budget:g} s of CPU per {ROUND_LINES} lines"
                )
                log.warning("job %s: %s", job_id, cursor.stopped)
    except IntegrityError:
        return True  # another process made the cursor meanwhile: look again
    return len(lines) == ROUND_LINES and not found.over_budget


def _lines_after(session: Session, job_id: str, host: str, seq: int) -> list[Line]:
    rows = session.execute(
        select(LogEvent.seq, LogEvent.time, LogEvent.stream, LogEvent.message)
        .where(LogEvent.job_id == job_id, LogEvent.host == host, LogEvent.seq > seq)
        .order_by(LogEvent.seq)
        .limit(ROUND_LINES)
    )
    return [Line(seq_, to_micros(time), stream, message) for seq_, time, stream, message in rows]


def _locked_cursor(session: Session, job_id: str, host: str) -> MetricCursor:
    """The host's cursor, made if it is not yet, held until the transaction ends."""
    query = (
        select(MetricCursor)
        .where(MetricCursor.job_id == job_id, MetricCursor.host == host)
        .with_for_update()
    )
    cursor = session.scalar(query)
    if cursor is None:
        session.add(MetricCursor(job_id=job_id, host=host, seq=0))
        session.flush()  # two processes making it: the second's flush fails, and it looks again
        cursor = session.scalar(query)
        assert cursor is not None
    return cursor
