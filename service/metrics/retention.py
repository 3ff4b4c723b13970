"""Log retention: the log lines and metric points of jobs that ended long enough ago.

It lives beside the metrics because it prunes both of a job's per-line records at once;
the job row, its transitions and its final metrics are kept, as SageMaker keeps a job's
description after its CloudWatch logs expire.

A week-long job may leave tens of millions of lines. They go in batches, each its own
short transaction, so the jobs still running (whose rows are never touched) go on
writing theirs meanwhile, and a retention run stopped half way has kept what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Delete, Select, delete, select
from sqlalchemy.orm import Session

from service.jobs.models import MetricPoint, MetricRollup, TrainingJob
from service.jobs.states import TERMINAL
from service.kit.db import session_scope, utcnow
from service.logs.models import LogEvent

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
    for table, counted in ((LogEvent, "log_lines"), (MetricPoint, "metric_points")):
        while True:
            chosen = select(table.id).where(table.job_id.in_(expired)).limit(batch_rows)
            with session_scope(database_url) as session:
                # The ids are read first: the DELETE then walks the primary key, and an
                # empty read says this table is done.
                ids = list(session.scalars(chosen))
                if not ids:
                    break
                deleted = _count(session, delete(table).where(table.id.in_(ids)))
            if counted == "log_lines":
                log_lines += deleted
            else:
                points += deleted
            if progress is not None:
                progress(Pruned(log_lines, points))
    with session_scope(database_url) as session:
        # At most one row per metric, host and minute: one statement is a short one.
        session.execute(
            delete(MetricRollup).where(MetricRollup.job_id.in_(expired)),
            execution_options={"synchronize_session": False},
        )
    return Pruned(log_lines=log_lines, metric_points=points)


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
