"""Data access for tuning jobs. Functions flush at most; the caller owns the transaction."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session, selectinload

from contract.hosts import host_names
from service.jobs.models import JobFinalMetric, MetricPoint, TrainingJob
from service.kit import keyset
from service.kit.errors import SpecError
from service.tuning.models import TuningJob, TuningTrial

LIVE = ("InProgress", "Stopping")
TERMINAL = frozenset({"Completed", "Failed", "Stopped"})


def get(session: Session, name: str, project: str, *, to_change: bool = False) -> TuningJob | None:
    """The tuning job of that name in ``project``, its trials loaded. ``to_change``:
    locked until the transaction ends (on PostgreSQL; SQLite's writer holds the whole
    database), so no tuner writes it between this read and the caller's write."""
    query = (
        select(TuningJob)
        .where(TuningJob.project == project, TuningJob.name == name)
        .options(selectinload(TuningJob.trials))
    )
    if to_change:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def get_by_id(session: Session, tuning_job_id: str, *, to_change: bool = False) -> TuningJob | None:
    query = (
        select(TuningJob)
        .where(TuningJob.id == tuning_job_id)
        .options(selectinload(TuningJob.trials))
    )
    if to_change:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def live_ids(session: Session) -> list[str]:
    """The tuning jobs a tuner still has work for."""
    return list(session.scalars(select(TuningJob.id).where(TuningJob.status.in_(LIVE))))


def tuning_job_of(session: Session, training_job_id: str) -> str | None:
    """The id of the tuning job whose trial that training job is, if any."""
    return session.scalar(
        select(TuningTrial.tuning_job_id).where(TuningTrial.training_job_id == training_job_id)
    )


def trial_jobs(session: Session, trials: Sequence[TuningTrial]) -> dict[str, Row[Any]]:
    """The status, failure reason and end of each trial's training job, by its id."""
    ids = [trial.training_job_id for trial in trials if trial.training_job_id]
    if not ids:
        return {}
    rows = session.execute(
        select(
            TrainingJob.id,
            TrainingJob.status,
            TrainingJob.failure_reason,
            TrainingJob.ended_at,
        ).where(TrainingJob.id.in_(ids))
    )
    return {row.id: cast(Row[Any], row) for row in rows}


def final_values(session: Session, job_ids: Sequence[str], metric: str) -> dict[str, float]:
    """The final value of ``metric`` of each job that has one."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(JobFinalMetric.job_id, JobFinalMetric.value).where(
            JobFinalMetric.job_id.in_(job_ids), JobFinalMetric.name == metric
        )
    )
    return {row.job_id: row.value for row in rows}


# A trial's steps are its objective's points on its first host, as SageMaker counts epochs.
FIRST_HOST = host_names(1)[0]


def objective_curves(
    session: Session, job_ids: Sequence[str], metric: str
) -> dict[str, list[float]]:
    """Each job's values of ``metric`` on its first host, in the order its lines came
    (its value at step 1 first): one query for all the jobs."""
    found: dict[str, list[float]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return found
    rows = session.execute(
        select(MetricPoint.job_id, MetricPoint.value)
        .where(
            MetricPoint.job_id.in_(job_ids),
            MetricPoint.name == metric,
            MetricPoint.host == FIRST_HOST,
        )
        .order_by(MetricPoint.job_id, MetricPoint.seq)
    )
    for row in rows:
        found[row.job_id].append(row.value)
    return found


def running_averages(
    session: Session, job_ids: Sequence[str], metric: str, steps: Sequence[int]
) -> dict[str, dict[int, float]]:
    """Each job's running average of ``metric`` on its first host up to each of
    ``steps`` it reached, by step: one query, which reads back only those averages, not
    every point of every job."""
    found: dict[str, dict[int, float]] = {job_id: {} for job_id in job_ids}
    if not job_ids or not steps:
        return found
    by_job, in_order = MetricPoint.job_id, (MetricPoint.seq, MetricPoint.id)
    numbered = (
        select(
            MetricPoint.job_id,
            func.row_number().over(partition_by=by_job, order_by=in_order).label("step"),
            func.avg(MetricPoint.value)
            .over(partition_by=by_job, order_by=in_order, rows=(None, 0))
            .label("average"),
        )
        .where(
            MetricPoint.job_id.in_(job_ids),
            MetricPoint.name == metric,
            MetricPoint.host == FIRST_HOST,
        )
        .subquery()
    )
    rows = session.execute(
        select(numbered.c.job_id, numbered.c.step, numbered.c.average).where(
            numbered.c.step.in_(sorted(set(steps)))
        )
    )
    for row in rows:
        found[row.job_id][int(row.step)] = float(row.average)
    return found


_KEYS = (keyset.Key(TuningJob.created_at, descending=True), keyset.Key(TuningJob.id, True))
SUMMARY_COLUMNS = (
    TuningJob.id,
    TuningJob.name,
    TuningJob.project,
    TuningJob.strategy,
    TuningJob.status,
    TuningJob.created_at,
    TuningJob.ended_at,
    # For the objective and the number of trials in all.
    TuningJob.spec,
)


def page(
    session: Session, project: str, *, limit: int, cursor: str | None, status: str | None = None
) -> tuple[list[Row[Any]], str | None]:
    """A page of the project's tuning jobs, newest first, and the cursor of the next."""
    query = select(*SUMMARY_COLUMNS).where(TuningJob.project == project)
    if status is not None:
        query = query.where(TuningJob.status == status)
    if cursor is not None:
        query = query.where(keyset.after(_KEYS, _read_cursor(cursor)))
    rows: list[Row[Any]] = list(
        session.execute(query.order_by(*keyset.ordering(_KEYS)).limit(limit + 1))
    )
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    place = keyset.to_json([last.created_at, last.id])
    return rows[:limit], base64.urlsafe_b64encode(json.dumps(place).encode()).decode()


def trial_states(session: Session, tuning_job_ids: Sequence[str]) -> dict[str, list[Row[Any]]]:
    """The number, name, status and objective of each trial of the tuning jobs named, by
    tuning job: one query for a page of tuning jobs, rather than one per tuning job."""
    found: dict[str, list[Row[Any]]] = {tuning_job_id: [] for tuning_job_id in tuning_job_ids}
    if not tuning_job_ids:
        return found
    rows = session.execute(
        select(
            TuningTrial.tuning_job_id,
            TuningTrial.number,
            TuningTrial.name,
            TuningTrial.definition,
            TuningTrial.status,
            TuningTrial.objective,
            TuningTrial.objective_status,
        )
        .where(TuningTrial.tuning_job_id.in_(tuning_job_ids))
        .order_by(TuningTrial.tuning_job_id, TuningTrial.number)
    )
    for row in rows:
        found[row.tuning_job_id].append(cast(Row[Any], row))
    return found


def _read_cursor(cursor: str) -> list[Any]:
    place = None
    with contextlib.suppress(ValueError, TypeError, binascii.Error):
        place = keyset.from_json(_KEYS, json.loads(base64.urlsafe_b64decode(cursor.encode())))
    if place is None:
        raise SpecError(("cursor",), "not a cursor this server gave", source="query")
    return place
