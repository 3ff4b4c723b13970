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

The work is bounded. RE2 searches in time linear in the line and in the pattern's program,
which is bounded at submission (``service.kit.patterns.MAX_METRIC_PROGRAM``), so one
search of one line is short (tens of milliseconds at most for a 16 KiB line, for a pattern
that keeps RE2 off its DFA). A round of at most ``ROUND_LINES`` lines ends once it has
cost ``CPU_BUDGET_SECONDS`` of the thread's CPU, looked at after each search, and the next
takes up from there; RE2 releases the GIL while it searches, so the API's other requests
go on meanwhile. A host whose lines cost the patterns more than
``MAX_NANOSECONDS_PER_CHARACTER`` is searched no further: the cursor says why, and so does
the job's log when it ends (judged on rounds of at least ``MIN_JUDGED_CPU_SECONDS``). A
batch that arrives while its host is being searched adds no thread: the search under way
looks again before it ends.
"""

from __future__ import annotations

import itertools
import logging
import threading
from contextlib import closing
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.jobs.models import MetricCursor, TrainingJob
from service.kit.db import session_scope
from service.logs import reading
from service.logs.schemas import Line
from service.metrics import service

log = logging.getLogger(__name__)

# At most this many lines (16 MiB of text at most) are held and searched at a time.
ROUND_LINES = 1000
# A round ends once it has cost this much of the thread's CPU, and the next takes up from
# the line it ended at: 1,000 lines of 80 characters and 40 definitions take about 0.03 s,
# of 16 KiB and 40 plain definitions about 0.3 s.
CPU_BUDGET_SECONDS = 2.0
# What the definitions' searches may cost per character of a line and definition before
# the host is searched no further: plain and wildcard patterns cost a few nanoseconds;
# patterns that keep RE2 off its DFA, thousands.
MAX_NANOSECONDS_PER_CHARACTER = 50.0
# ... judged on a round that took at least this much CPU: a shorter sample is one garbage
# collection or one cold cache away from any figure (a costly line of 16 KiB takes tens
# of milliseconds alone).
MIN_JUDGED_CPU_SECONDS = 0.01


@dataclass
class _Search:
    """A host's search under way in this process; ``again``: lines arrived meanwhile."""

    again: bool = False


# One search per host at a time in this process, and no thread waiting for one: a batch
# whose host is being searched asks that search to look again before it ends.
_searching: dict[tuple[str, str], _Search] = {}
_searching_lock = threading.Lock()


def extract_pending(
    database_url: str, job_id: str, host: str, cpu_budget: float = CPU_BUDGET_SECONDS
) -> None:
    """Search the host's lines after its cursor, round by round, until none is left;
    each round may cost ``cpu_budget`` seconds of CPU."""
    key = (job_id, host)
    with _searching_lock:
        running = _searching.get(key)
        if running is not None:
            running.again = True
            return
        running = _searching[key] = _Search()
    try:
        while True:
            running.again = False
            while _round(database_url, job_id, host, cpu_budget):
                pass
            with _searching_lock:
                if not running.again:
                    del _searching[key]
                    return
    except BaseException:
        with _searching_lock:
            _searching.pop(key, None)
        raise


def extract_after_answer(database_url: str, job_id: str, host: str) -> None:
    """``extract_pending`` as a request's background task: its response is sent, so what
    goes wrong is logged here, naming the job and host (the worker searches what is left
    before the job ends)."""
    try:
        extract_pending(database_url, job_id, host)
    except Exception:
        log.exception("searching the lines of job %s, host %s, for metrics failed", job_id, host)


def stopped_hosts(session: Session, job_id: str) -> dict[str, str]:
    """The hosts whose lines were left unsearched, and why."""
    rows = session.execute(
        select(MetricCursor.host, MetricCursor.stopped).where(
            MetricCursor.job_id == job_id, MetricCursor.stopped.is_not(None)
        )
    )
    return {host: str(why) for host, why in rows}


def _round(
    database_url: str, job_id: str, host: str, cpu_budget: float = CPU_BUDGET_SECONDS
) -> bool:
    """One round; whether to go on with another."""
    with session_scope(database_url, readonly=True) as session:
        job = session.get(TrainingJob, job_id)
        if job is None or not job.record.metric_definitions:
            return False
        cursor = session.get(MetricCursor, (job_id, host))
        if cursor is not None and cursor.stopped:
            return False
        start = cursor.seq if cursor is not None else 0
        defined = service.definitions(job.record)
        lines = _lines_after(session, job_id, host, start)
    if not lines:
        return False
    found = service.find(job_id, host, defined, lines, cpu_budget, after=start)
    costly = (
        found.over_budget
        and found.cpu_seconds >= MIN_JUDGED_CPU_SECONDS
        and found.nanoseconds_per_character > MAX_NANOSECONDS_PER_CHARACTER
    )
    with session_scope(database_url) as session:
        cursor = _locked_cursor(session, job_id, host)
        if cursor.seq != start:
            return True  # another process searched these lines meanwhile: look again
        service.store(session, found.points)
        cursor.seq = found.last_seq
        if costly:
            cursor.stopped = (
                f"Metrics were not searched for after line {found.last_seq} of {host}: its "
                f"lines cost the metric definitions' patterns "
                f"{found.nanoseconds_per_character:.0f} ns of CPU per character, more than "
                f"{MAX_NANOSECONDS_PER_CHARACTER:g}"
            )
            log.warning("job %s: %s", job_id, cursor.stopped)
    if costly:
        return False
    # A round cut short by its budget goes on where it ended; a whole one, if it was full.
    return found.over_budget or len(lines) == ROUND_LINES


def _lines_after(session: Session, job_id: str, host: str, seq: int) -> list[Line]:
    with closing(reading.by_seq(session, job_id, host, after=seq)) as lines:
        return [
            Line(line.seq, line.micros, line.stream, line.message)
            for line in itertools.islice(lines, ROUND_LINES)
        ]


def _locked_cursor(session: Session, job_id: str, host: str) -> MetricCursor:
    """The host's cursor, made if it is not yet (by whichever process comes first: the
    others' inserts do nothing), held until the transaction ends."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(MetricCursor).values(job_id=job_id, host=host, seq=0).on_conflict_do_nothing()
    )
    query = (
        select(MetricCursor)
        .where(MetricCursor.job_id == job_id, MetricCursor.host == host)
        .with_for_update()
    )
    cursor = session.scalar(query)
    assert cursor is not None  # made above, or by another
    return cursor
