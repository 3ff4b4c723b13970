"""Instance metrics: what each instance's runtime measures of itself (CPU, memory, disk,
GPUs) every few seconds, stored as the job's metric points under names no metric
definition may take (``INSTANCE_METRIC_PREFIX`` and SageMaker's CloudWatch name), so the
metric routes, rollups, downsampling, retention and CloudWatch serve them as they serve
the job's own, per host."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from contract import protocol
from contract.protocol import InstanceMetric
from service.jobs.models import MetricRollup, TrainingJob
from service.jobs.spec_parts import INSTANCE_METRIC_PREFIX, Strict
from service.kit.errors import NotFound
from service.kit.integers import INT32_MAX, INT32_MIN
from service.kit.protocol import body_reader, model_of
from service.metrics.schemas import MetricSeries
from service.metrics.service import Point, Window, insert_new, named_series

# A sample's time, seconds since the epoch in UTC, up to the end of year 9999.
Stamp = Annotated[float, Field(ge=0, lt=253_402_300_800, allow_inf_nan=False)]
# A percentage, summed over an instance's CPUs or GPUs: at most 100 for each of as many
# as any machine has.
Percent = Annotated[float, Field(ge=0, le=100 * 4096, allow_inf_nan=False)]

InstanceMetricsBody = model_of(
    protocol.InstanceMetrics,
    base=Strict,
    refined={"rows": list[tuple[Stamp, InstanceMetric, Percent]]},
)
read_instance_metrics = body_reader(protocol.InstanceMetrics, InstanceMetricsBody)


def stored_name(metric: InstanceMetric) -> str:
    return f"{INSTANCE_METRIC_PREFIX}{metric}"


def metric_of(name: str) -> InstanceMetric | None:
    """The instance metric stored as ``name``, if it is one."""
    if not name.startswith(INSTANCE_METRIC_PREFIX):
        return None
    try:
        return InstanceMetric(name.removeprefix(INSTANCE_METRIC_PREFIX))
    except ValueError:
        return None


STORED_NAMES = tuple(stored_name(metric) for metric in InstanceMetric)


def store(session: Session, job: TrainingJob, host: str, message: protocol.InstanceMetrics) -> int:
    """Store a host's samples; how many were new. A sample is numbered by its whole
    second from the job's creation (before it, should the instance's clock be behind),
    as samples are at least a second apart: a batch sent again after a lost answer is
    stored once."""
    created = job.created_at.timestamp()
    points = [
        Point(
            job_id=job.id,
            name=stored_name(metric),
            host=host,
            seq=min(max(math.floor(time - created), INT32_MIN), INT32_MAX),
            time=datetime.fromtimestamp(time, UTC),
            value=value,
        )
        for time, metric, value in message.rows
    ]
    return len(insert_new(session, points))


def measured(session: Session, job_id: str) -> list[InstanceMetric]:
    """The instance metrics the job has points of, in InstanceMetric's order."""
    query = (
        select(MetricRollup.name)
        .where(MetricRollup.job_id == job_id, MetricRollup.name.in_(STORED_NAMES))
        .distinct()
    )
    found = set(session.scalars(query))
    return [metric for metric in InstanceMetric if stored_name(metric) in found]


def series(
    session: Session, job: TrainingJob, *, name: str | None, window: Window
) -> list[MetricSeries]:
    """Each instance metric the job has points of (or only ``name``, by its CloudWatch
    name), every host's points in the window."""
    metrics = measured(session, job.id)
    if name is not None:
        metrics = [metric for metric in metrics if metric == name]
        if not metrics:
            raise NotFound(f"training job {job.name!r} has no instance metric named {name!r}")
    return [
        named_series(session, job.id, stored_name(metric), window).model_copy(
            update={"name": str(metric)}
        )
        for metric in metrics
    ]
