"""Per-minute rollups of metric points (:class:`MetricRollup`), added to as points are
stored, so that a chart over a long range never reads every point."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.jobs.models import MetricRollup


class StoredPoint(Protocol):
    @property
    def job_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def time(self) -> datetime: ...
    @property
    def value(self) -> float: ...


@dataclass
class _Sum:
    count: int
    total: float
    low: float
    high: float


def minute_of(time: datetime) -> datetime:
    return time.replace(second=0, microsecond=0)


def add(session: Session, points: Iterable[StoredPoint]) -> None:
    """Add newly stored points to their minutes' rollups (one upsert per metric, host and
    minute the batch touches: usually one or two)."""
    sums: dict[tuple[str, str, str, datetime], _Sum] = {}
    for point in points:
        key = (point.job_id, point.name, point.host, minute_of(point.time))
        found = sums.get(key)
        if found is None:
            sums[key] = _Sum(1, point.value, point.value, point.value)
        else:
            found.count += 1
            found.total += point.value
            found.low = min(found.low, point.value)
            found.high = max(found.high, point.value)
    if not sums:
        return
    postgresql = session.get_bind().dialect.name == "postgresql"
    insert = postgresql_insert if postgresql else sqlite_insert
    # SQLite's two-argument min/max are its least/greatest.
    least, greatest = (func.least, func.greatest) if postgresql else (func.min, func.max)
    statement = insert(MetricRollup)
    statement = statement.on_conflict_do_update(
        index_elements=["job_id", "name", "host", "minute"],
        set_={
            "count": MetricRollup.count + statement.excluded.count,
            "total": MetricRollup.total + statement.excluded.total,
            "low": least(MetricRollup.low, statement.excluded.low),
            "high": greatest(MetricRollup.high, statement.excluded.high),
        },
    )
    # In key order, so two batches of one job that touch the same rows lock them in the
    # same order.
    rows = [
        {"job_id": job_id, "name": name, "host": host, "minute": minute, **vars(total)}
        for (job_id, name, host, minute), total in sorted(sums.items())
    ]
    session.execute(statement, rows)
