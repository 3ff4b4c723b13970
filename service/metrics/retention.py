"""Log retention: the log lines and metric points of jobs that ended long enough ago.

It lives beside the metrics because it prunes both of a job's per-line records at once;
the job row, its transitions and its final metrics are kept, as SageMaker keeps a job's
description after its CloudWatch logs expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Delete, delete, select
from sqlalchemy.orm import Session

from service.jobs.models import MetricPoint, TrainingJob
from service.jobs.states import TERMINAL
from service.kit.db import utcnow
from service.logs.models import LogEvent


@dataclass(frozen=True)
class Pruned:
    log_lines: int
    metric_points: int


def prune_ended_jobs(session: Session, retention_days: int, now: datetime | None = None) -> Pruned:
    """Delete what jobs that ended over ``retention_days`` ago logged; 0 keeps everything.
    A job counts only once it is terminal with an end time, so a live job is never touched,
    however old it is."""
    if retention_days <= 0:
        return Pruned(0, 0)
    cutoff = (now or utcnow()) - timedelta(days=retention_days)
    expired = select(TrainingJob.id).where(
        TrainingJob.status.in_([str(status) for status in TERMINAL]),
        TrainingJob.ended_at.is_not(None),
        TrainingJob.ended_at < cutoff,
    )
    log_lines = _count(session, delete(LogEvent).where(LogEvent.job_id.in_(expired)))
    points = _count(session, delete(MetricPoint).where(MetricPoint.job_id.in_(expired)))
    return Pruned(log_lines=log_lines, metric_points=points)


def _count(session: Session, statement: Delete) -> int:
    # A bulk DELETE always yields a cursor result, which is what carries the row count.
    result = session.execute(statement, execution_options={"synchronize_session": False})
    return int(cast("CursorResult[Any]", result).rowcount)
