"""A metric over a long range, in at most N points per host: each the count, mean, least
and greatest of the points within its bucket of time.

Buckets of a minute or more are summed from the per-minute rollups (a week of one point
a second is 10,080 rows per host, not 604,800); shorter ones from the points themselves,
whose range then spans at most N minutes. A range that holds no more than N points is
answered with the points as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Float, func, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from service.jobs.models import MetricPoint, MetricRollup
from service.kit.db import EPOCH
from service.metrics.rollups import minute_of
from service.metrics.schemas import MetricPointPublic

MINUTE = 60.0


class _Templated(FunctionElement[float]):
    """A function written differently on each database: ``{}`` is its argument."""

    type = Float()
    inherit_cache = True
    templates: ClassVar[dict[str, str]] = {}


@compiles(_Templated)
def _templated(element: _Templated, compiler: SQLCompiler, **kw: Any) -> str:
    return element.templates[compiler.dialect.name].format(compiler.process(element.clauses, **kw))


class _EpochSeconds(_Templated):
    """Seconds since the epoch of a UTC DateTime column."""

    inherit_cache = True
    # SQLite stores the text SQLAlchemy writes; julianday reads it (to the millisecond).
    templates: ClassVar[dict[str, str]] = {
        "postgresql": "extract(epoch from {})",
        "sqlite": "((julianday({}) - 2440587.5) * 86400.0)",
    }


class _Floor(_Templated):
    inherit_cache = True
    # The argument is never negative here, so on SQLite truncation is the floor.
    templates: ClassVar[dict[str, str]] = {
        "postgresql": "floor({})",
        "sqlite": "cast({} as integer)",
    }


@dataclass
class _Bucket:
    count: int
    total: float
    low: float
    high: float


@dataclass(frozen=True)
class Downsampled:
    points: list[MetricPointPublic]
    # None: the points are the stored ones, not buckets.
    bucket_seconds: float | None


def downsample(
    session: Session,
    job_id: str,
    name: str,
    *,
    start: datetime | None,
    end: datetime | None,
    max_points: int,
) -> Downsampled:
    bounds = _bounds(session, job_id, name, start, end)
    if bounds is None:
        return Downsampled([], None)
    first, last = bounds
    if _stored_at_most(session, job_id, name, first, last) <= max_points:
        return Downsampled(_points(session, job_id, name, first, last), None)
    width = max((last - first).total_seconds() / max_points, 1e-6)
    if width >= MINUTE:
        width = math.ceil(width / MINUTE) * MINUTE
        anchor = minute_of(first)
        rows = _rollup_buckets(session, job_id, name, anchor, last, width)
    else:
        anchor = first
        rows = _point_buckets(session, job_id, name, anchor, last, width)
    return Downsampled(_public(rows, anchor, width, max_points), width)


def _bounds(
    session: Session, job_id: str, name: str, start: datetime | None, end: datetime | None
) -> tuple[datetime, datetime] | None:
    """The times of the first and last point within the range (the index's two ends)."""
    query = select(func.min(MetricPoint.time), func.max(MetricPoint.time)).where(
        *_of(job_id, name, start, end)
    )
    first, last = session.execute(query).one()
    return None if first is None else (first, last)


def _of(
    job_id: str, name: str, start: datetime | None, end: datetime | None
) -> list[ColumnElement[bool]]:
    conditions = [MetricPoint.job_id == job_id, MetricPoint.name == name]
    if start is not None:
        conditions.append(MetricPoint.time >= start)
    if end is not None:
        conditions.append(MetricPoint.time <= end)
    return conditions


def _stored_at_most(
    session: Session, job_id: str, name: str, first: datetime, last: datetime
) -> int:
    """At least as many as the points between first and last: every host's points of the
    minutes they fall in."""
    query = select(func.coalesce(func.sum(MetricRollup.count), 0)).where(
        MetricRollup.job_id == job_id,
        MetricRollup.name == name,
        MetricRollup.minute >= minute_of(first),
        MetricRollup.minute <= last,
    )
    return int(session.scalar(query) or 0)


def _points(
    session: Session, job_id: str, name: str, first: datetime, last: datetime
) -> list[MetricPointPublic]:
    query = (
        select(MetricPoint)
        .where(*_of(job_id, name, first, last))
        .order_by(MetricPoint.time, MetricPoint.id)
    )
    return [MetricPointPublic.model_validate(row) for row in session.scalars(query)]


def _bucket_of(
    column: Any, anchor: datetime, width: float, nudge: float = 0.0
) -> ColumnElement[float]:
    since = (anchor - EPOCH).total_seconds() - nudge
    return _Floor((_EpochSeconds(column) - since) / width)


def _rollup_buckets(
    session: Session, job_id: str, name: str, anchor: datetime, last: datetime, width: float
) -> list[Any]:
    # Minutes sit on bucket edges, where a rounding error would move one a bucket back:
    # half a minute later they are safely inside theirs.
    bucket = _bucket_of(MetricRollup.minute, anchor, width, MINUTE / 2).label("bucket")
    query = (
        select(
            MetricRollup.host,
            bucket,
            func.sum(MetricRollup.count),
            func.sum(MetricRollup.total),
            func.min(MetricRollup.low),
            func.max(MetricRollup.high),
        )
        .where(
            MetricRollup.job_id == job_id,
            MetricRollup.name == name,
            MetricRollup.minute >= anchor,
            MetricRollup.minute <= last,
        )
        .group_by(MetricRollup.host, bucket)
    )
    return list(session.execute(query))


def _point_buckets(
    session: Session, job_id: str, name: str, anchor: datetime, last: datetime, width: float
) -> list[Any]:
    bucket = _bucket_of(MetricPoint.time, anchor, width).label("bucket")
    query = (
        select(
            MetricPoint.host,
            bucket,
            func.count(),
            func.sum(MetricPoint.value),
            func.min(MetricPoint.value),
            func.max(MetricPoint.value),
        )
        .where(*_of(job_id, name, anchor, last))
        .group_by(MetricPoint.host, bucket)
    )
    return list(session.execute(query))


def _public(
    rows: list[Any], anchor: datetime, width: float, max_points: int
) -> list[MetricPointPublic]:
    buckets: dict[tuple[int, str], _Bucket] = {}
    for host, index, count, total, low, high in rows:
        # The last point may sit exactly on the far edge: it joins the last bucket.
        key = (min(int(index), max_points - 1), host)
        found = buckets.get(key)
        if found is None:
            buckets[key] = _Bucket(int(count), float(total), float(low), float(high))
        else:
            found.count += int(count)
            found.total += float(total)
            found.low = min(found.low, float(low))
            found.high = max(found.high, float(high))
    return [
        MetricPointPublic(
            time=anchor + timedelta(seconds=index * width),
            value=bucket.total / bucket.count,
            host=host,
            count=bucket.count,
            minimum=bucket.low,
            maximum=bucket.high,
        )
        for (index, host), bucket in sorted(buckets.items())
    ]
