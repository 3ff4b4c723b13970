"""Metrics: values that a job's ``metric_definitions`` find in its log lines.

Points are found once per line, after it is stored and before anyone reads them
(``service.metrics.extraction`` says when and how much work each search may take); this
module finds them in lines and stores them, with each metric's latest value and the
job's progress.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.jobs.models import JobFinalMetric, MetricPoint, TrainingJob
from service.jobs.record import JobRecord
from service.kit import patterns
from service.kit.db import from_micros
from service.kit.errors import NotFound
from service.logs.schemas import Line
from service.metrics import rollups
from service.metrics.downsample import downsample
from service.metrics.schemas import MetricPointPublic, MetricSeries

# The runtime's own lines are not the script's output and never hold its metrics.
SCRIPT_STREAMS = frozenset({"stdout", "stderr"})
# Points are stored with one executemany on the table: a batch of lines can hold
# thousands, and ORM objects would cost several times the insert.
_METRIC_POINTS = cast(Table, MetricPoint.__table__)


@dataclass(frozen=True)
class _Definition:
    name: str
    pattern: patterns.Pattern


@dataclass(frozen=True, slots=True)
class Point:
    """A metric_points row, as it is inserted."""

    job_id: str
    name: str
    host: str
    seq: int
    time: datetime
    value: float


@dataclass(frozen=True)
class Found:
    """What searching some lines gave: their points, the last line searched whole, whether
    its budget was spent (the search stops there), what it cost per character searched and
    definition, and the thread's CPU seconds it took."""

    points: list[Point]
    last_seq: int
    over_budget: bool
    nanoseconds_per_character: float = 0.0
    cpu_seconds: float = 0.0


def definitions(spec: JobRecord) -> list[_Definition]:
    """The job's metric definitions, compiled (once per search: RE2's cache holds only
    so many patterns)."""
    return [
        _Definition(item.name, patterns.compile_pattern(item.regex))
        for item in spec.metric_definitions
    ]


# What one search costs besides its characters (the call, the match object), counted as
# this many characters: short lines are then not taken for costly ones.
SEARCH_OVERHEAD_CHARACTERS = 1000


def find(
    job_id: str,
    host: str,
    defined: list[_Definition],
    lines: Sequence[Line],
    cpu_budget: float,
    *,
    after: int = 0,
) -> Found:
    """The points in ``lines`` (one host's, in seq order, all after line ``after``),
    searched until this thread has spent ``cpu_budget`` seconds of CPU on them (looked at
    after each search, which RE2 cannot be stopped in, once the first line is searched
    whole): the line it ran out on and those after are left unsearched."""
    started = time.thread_time()
    points: list[Point] = []
    last, searched = after, 0
    for line in lines:
        found = []
        if line.stream in SCRIPT_STREAMS:
            for definition in defined:
                value = _value(definition.pattern, line.message)
                searched += len(line.message) + SEARCH_OVERHEAD_CHARACTERS
                spent = time.thread_time() - started
                if spent > cpu_budget and last != after:
                    return Found(points, last, True, spent * 1e9 / searched, spent)
                if value is not None:
                    time_ = from_micros(line.micros)
                    found.append(Point(job_id, definition.name, host, line.seq, time_, value))
        points += found
        last = line.seq
        spent = time.thread_time() - started
        if spent > cpu_budget:
            return Found(points, last, True, spent * 1e9 / max(searched, 1), spent)
    spent = time.thread_time() - started
    return Found(points, last, False, spent * 1e9 / max(searched, 1), spent)


def store(session: Session, points: list[Point]) -> None:
    """Store ``points`` and move each metric's latest value and the job's progress on.
    A point of a line already stored (by a server of before searches had cursors, during
    an upgrade) is left as it is, and counted once."""
    points = insert_new(session, points)
    if not points:
        return
    _update_final(session, _latest_by_name(points))
    _update_progress(session, points[0].job_id, points)


def insert_new(session: Session, points: list[Point]) -> list[Point]:
    """Store those of ``points`` not stored yet (by their host and seq) with their
    minutes' rollups; the ones stored now."""
    if not points:
        return []
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = (
        insert(_METRIC_POINTS)
        .on_conflict_do_nothing(index_elements=["job_id", "name", "host", "seq"])
        .returning(_METRIC_POINTS.c.name, _METRIC_POINTS.c.host, _METRIC_POINTS.c.seq)
    )
    rows = session.execute(statement, [asdict(p) for p in points])
    stored = {(name, host, seq) for name, host, seq in rows}
    points = [point for point in points if (point.name, point.host, point.seq) in stored]
    rollups.add(session, points)
    return points


@dataclass(frozen=True)
class Window:
    """Which points of a series to answer with: the latest ``limit`` between start and
    end, or with ``max_points`` all of them, downsampled to that many per host."""

    start: datetime | None = None
    end: datetime | None = None
    limit: int = 1000
    max_points: int | None = None


def series(
    session: Session, job: TrainingJob, *, name: str | None, window: Window
) -> list[MetricSeries]:
    """Each defined metric (or only ``name``) with its points in the window, by time."""
    names = [item.name for item in job.record.metric_definitions]
    if name is not None:
        if name not in names:
            raise NotFound(f"training job {job.name!r} defines no metric named {name!r}")
        names = [name]
    return [named_series(session, job.id, metric, window) for metric in names]


def named_series(session: Session, job_id: str, name: str, window: Window) -> MetricSeries:
    if window.max_points is None:
        return MetricSeries(name=name, points=_latest_points(session, job_id, name, window))
    found = downsample(
        session,
        job_id,
        name,
        start=window.start,
        end=window.end,
        max_points=window.max_points,
    )
    return MetricSeries(name=name, points=found.points, bucket_seconds=found.bucket_seconds)


def _value(pattern: patterns.Pattern, message: str) -> float | None:
    """The first match's group as a finite number, else None. NaN and infinities are
    dropped: they are not JSON, and a chart or a "final" value cannot use them."""
    match = patterns.search(pattern, message)
    if match is None or match.group(1) is None:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _latest_by_name(points: list[Point]) -> list[Point]:
    # Points come in seq order, so on equal times the later line wins.
    latest: dict[str, Point] = {}
    for point in points:
        current = latest.get(point.name)
        if current is None or point.time >= current.time:
            latest[point.name] = point
    return list(latest.values())


def _update_final(session: Session, points: list[Point]) -> None:
    """Upsert each metric's latest value, keeping a later one already stored (another
    host may have reported it). One statement per metric, so two hosts' batches racing
    on the same metric cannot fail on the primary key."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    # By name: two writers (hosts, the API and the worker) lock the rows in one order.
    for point in sorted(points, key=lambda point: point.name):
        statement = insert(JobFinalMetric).values(
            job_id=point.job_id,
            name=point.name,
            value=point.value,
            time=point.time,
            host=point.host,
        )
        statement = statement.on_conflict_do_update(
            index_elements=["job_id", "name"],
            set_={key: statement.excluded[key] for key in ("value", "time", "host")},
            where=statement.excluded.time >= JobFinalMetric.time,
        )
        session.execute(statement)


def _update_progress(session: Session, job_id: str, points: list[Point]) -> None:
    """Move the job's progress forward from its progress metric, if it names one. A plain
    UPDATE, not a change of the ORM row: it must not count as a new version of the job,
    which would make the reconciler's concurrent step start over."""
    job = session.get(TrainingJob, job_id)
    if job is None:
        return
    progress = job.record.progress_metric
    if progress is None:
        return
    # An earlier attempt's lines, searched late, say nothing of this attempt's progress.
    values = [
        point
        for point in points
        if point.name == progress.name and point.seq >= job.attempt_first_log_seq
    ]
    if not values:
        return
    total = progress.total

    def fraction_of(point: Point) -> float:
        return min(max(point.value / total, 0.0), 1.0)

    # Points come in seq order, so on equal times the later line counts as the latest.
    first = min(values, key=lambda point: point.time)
    point = max(reversed(values), key=lambda point: point.time)
    fraction = fraction_of(point)
    statement = (
        update(TrainingJob)
        .where(
            TrainingJob.id == job_id,
            # Another host's later value may be in already.
            or_(TrainingJob.progress_at.is_(None), TrainingJob.progress_at <= point.time),
        )
        .values(
            progress=fraction,
            progress_at=point.time,
            progress_first=func.coalesce(TrainingJob.progress_first, fraction_of(first)),
            progress_first_at=func.coalesce(TrainingJob.progress_first_at, first.time),
        )
        .execution_options(synchronize_session=False)
    )
    session.execute(statement)


def _latest_points(
    session: Session, job_id: str, name: str, window: Window
) -> list[MetricPointPublic]:
    query = select(MetricPoint).where(MetricPoint.job_id == job_id, MetricPoint.name == name)
    if window.start is not None:
        query = query.where(MetricPoint.time >= window.start)
    if window.end is not None:
        query = query.where(MetricPoint.time <= window.end)
    query = query.order_by(MetricPoint.time.desc(), MetricPoint.id.desc()).limit(window.limit)
    rows = list(session.scalars(query))
    return [MetricPointPublic.model_validate(row) for row in reversed(rows)]
