"""A metric's statistics period by period, over every host of a job or one: what CloudWatch's
GetMetricStatistics and GetMetricData answer with.

Periods of whole minutes are summed from the per-minute rollups (a day of one point a
second is 1,440 rows per host, not 86,400), and only a last part-minute before the end
from the points themselves. Shorter periods, and percentiles, which need every value,
read the points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.jobs.models import MetricPoint, MetricRollup
from service.metrics.rollups import minute_of

MINUTE = 60


@dataclass
class Period:
    """The points of one period: how many, their sum, least and greatest, and (when
    percentiles were asked for) every value."""

    start: datetime
    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    values: list[float] = field(default_factory=list)

    @property
    def average(self) -> float:
        return self.total / self.count

    def add(self, count: int, total: float, low: float, high: float) -> None:
        self.count += count
        self.total += total
        self.low = min(self.low, low)
        self.high = max(self.high, high)

    def percentile(self, rank: float) -> float:
        """The nearest-rank percentile: the least value that ``rank`` percent of the
        values are at or below."""
        ordered = sorted(self.values)
        index = math.ceil(rank / 100 * len(ordered)) - 1
        return ordered[min(max(index, 0), len(ordered) - 1)]


class TooManyRows(ValueError):
    """A request would read more of the stored points and rollups than it may."""


@dataclass
class Budget:
    """How many stored rows (points and per-minute rollups) one request may still read:
    what bounds the work of a request, whatever its time range, periods and queries."""

    rows: int

    def take(self, rows: list[Any]) -> list[Any]:
        if len(rows) > self.rows:
            raise TooManyRows(f"more than {self.rows} stored rows")
        self.rows -= len(rows)
        return rows


def per_period(
    session: Session,
    job_id: str,
    name: str,
    *,
    start: datetime,
    end: datetime,
    seconds: int,
    budget: Budget,
    with_values: bool = False,
    host: str | None = None,
) -> list[Period]:
    """The periods of ``seconds`` from ``start`` that hold points before ``end``
    (exclusive), in time order, of every host or only ``host``; ``with_values`` keeps each
    value, for percentiles."""
    periods: dict[int, Period] = {}

    def period_of(time: datetime) -> Period:
        index = int((time - start).total_seconds() // seconds)
        found = periods.get(index)
        if found is None:
            found = periods[index] = Period(start + timedelta(seconds=index * seconds))
        return found

    points_from = start
    if not with_values and seconds % MINUTE == 0 and start == minute_of(start):
        points_from = max(start, minute_of(end))
        minutes = _minutes(session, job_id, name, host, start, points_from, budget.rows + 1)
        for minute, count, total, low, high in budget.take(minutes):
            period_of(minute).add(int(count), float(total), float(low), float(high))
    points = _points(session, job_id, name, host, points_from, end, budget.rows + 1)
    for time, value in budget.take(points):
        period = period_of(time)
        period.add(1, value, value, value)
        if with_values:
            period.values.append(value)
    return [periods[index] for index in sorted(periods)]


def _minutes(
    session: Session,
    job_id: str,
    name: str,
    host: str | None,
    start: datetime,
    end: datetime,
    limit: int,
) -> list[Any]:
    """Every host's (or ``host``'s) rollups of the whole minutes in [start, end), summed
    per minute."""
    if start >= end:
        return []
    query = (
        select(
            MetricRollup.minute,
            func.sum(MetricRollup.count),
            func.sum(MetricRollup.total),
            func.min(MetricRollup.low),
            func.max(MetricRollup.high),
        )
        .where(
            MetricRollup.job_id == job_id,
            MetricRollup.name == name,
            MetricRollup.minute >= start,
            MetricRollup.minute < end,
        )
        .group_by(MetricRollup.minute)
        .limit(limit)
    )
    if host is not None:
        query = query.where(MetricRollup.host == host)
    return list(session.execute(query))


def _points(
    session: Session,
    job_id: str,
    name: str,
    host: str | None,
    start: datetime,
    end: datetime,
    limit: int,
) -> list[Any]:
    if start >= end:
        return []
    query = select(MetricPoint.time, MetricPoint.value).where(
        MetricPoint.job_id == job_id,
        MetricPoint.name == name,
        MetricPoint.time >= start,
        MetricPoint.time < end,
    )
    if host is not None:
        query = query.where(MetricPoint.host == host)
    return list(session.execute(query.limit(limit)))
