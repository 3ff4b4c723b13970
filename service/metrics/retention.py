"""Log retention: the log lines and metric points of jobs that ended long enough ago.

It lives beside the metrics because it prunes both of a job's per-line records at once
(its lines are stored a chunk of them to a row);
the job row, its transitions and its final metrics are kept, as SageMaker keeps a job's
description after its CloudWatch logs expire.

A week-long job may leave tens of millions of lines. They go in batches, each its own
short transaction, so the jobs still running (whose rows are never touched) go on
writing theirs meanwhile, and a retention run stopped half way has kept what it did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Delete, Select, delete, select
from sqlalchemy.orm import Session

from service.jobs.models import MetricPoint, MetricRollup, TrainingJob
from service.jobs.states import TERMINAL
from service.kit.db import session_scope, utcnow
from service.logs.models import LogChunk

BATCH_ROWS = 5000


@dataclass(frozen=True)
class Pruned:
    log_lines: int
    metric_points: int


def prune_ended_jobs(
    database_url: str,
    retention_days: int,
    now: datetime | None = None,
    *,
    batch_rows: int = BATCH_ROWS,
    progress: Callable[[Pruned], None] | None = None,
) -> Pruned:
    """Delete what jobs that ended over ``retention_days`` ago logged; 0 keeps everything.
    A job counts only once it is terminal with an end time, so a live job is never touched,
    however old it is. ``progress`` hears the running totals after each batch."""
    if retention_days <= 0:
        return Pruned(0, 0)
    expired = _expired((now or utcnow()) - timedelta(days=retention_days))
    log_lines = points = 0
    while True:
        with session_scope(database_url) as session:
            # The ids are read first: the DELETE then walks the primary key, and an empty
            # read says the chunks are done. A batch is batch_rows lines (or one chunk).
            chosen = _lines_worth(
                session.execute(
                    select(LogChunk.id, LogChunk.last_seq - LogChunk.first_seq + 1)
                    .where(LogChunk.job_id.in_(expired))
                    .limit(batch_rows)
                ).all(),
                batch_rows,
            )
            if not chosen:
                break
            _count(session, delete(LogChunk).where(LogChunk.id.in_([id_ for id_, _ in chosen])))
        log_lines += sum(lines for _, lines in chosen)
        if progress is not None:
            progress(Pruned(log_lines, points))
    while True:
        chosen_points = select(MetricPoint.id).where(MetricPoint.job_id.in_(expired))
        with session_scope(database_url) as session:
            ids = list(session.scalars(chosen_points.limit(batch_rows)))
            if not ids:
                break
            points += _count(session, delete(MetricPoint).where(MetricPoint.id.in_(ids)))
        if progress is not None:
            progress(Pruned(log_lines, points))
    with session_scope(database_url) as session:
        # At most one row per metric, host and minute: one statement is a short one.
        session.execute(
            delete(MetricRollup).where(MetricRollup.job_id.in_(expired)),
            execution_options={"synchronize_session": False},
        )
    return Pruned(log_lines=log_lines, metric_points=points)


def _lines_worth(chunks: Sequence[Any], lines: int) -> Sequence[Any]:
    """The first of ``chunks`` (id, lines) that hold ``lines`` lines together, one at least."""
    taken = 0
    for count, (_, held) in enumerate(chunks):
        taken += held
        if taken > lines and count:
            return chunks[:count]
    return chunks


def _expired(cutoff: datetime) -> Select[str]:
    return select(TrainingJob.id).where(
        TrainingJob.status.in_([str(status) for status in TERMINAL]),
        TrainingJob.ended_at.is_not(None),
        TrainingJob.ended_at < cutoff,
    )


def _count(session: Session, statement: Delete) -> int:
    # A bulk DELETE always yields a cursor result, which is what carries the row count.
    result = session.execute(statement, execution_options={"synchronize_session": False})
    return int(cast("CursorResult[Any]", result).rowcount)
