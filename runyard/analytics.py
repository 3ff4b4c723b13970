"""``estimator.training_job_analytics``: a job's metrics as a pandas DataFrame, in the
shape of the SageMaker SDK's ``TrainingJobAnalytics``.

As there, ``dataframe()`` has the columns ``timestamp`` (seconds since the metric's first
period), ``metric_name`` and ``value`` (the average of the metric's points in each period
of ``period`` seconds, all hosts together, as CloudWatch's Average statistic gives it),
one row per metric and period, ordered by metric and time. The periods start at the job's
training start rounded down to the minute, as CloudWatch rounds the SDK's start time.

pandas is not one of Runyard's own dependencies: ``pip install 'runyard[analytics]'``
brings it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.client import Client

if TYPE_CHECKING:
    import pandas

# CloudWatch's period when the SDK is given none.
DEFAULT_PERIOD = 60
# Each metric is read whole; one with more points than this (per job, every host) comes
# from the server downsampled, each point the mean of a bucket of whole minutes.
MAX_POINTS = 10_000
COLUMNS = ("timestamp", "metric_name", "value")
MINUTE = 60


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "training_job_analytics needs pandas, which Runyard does not install by itself: "
            "pip install 'runyard[analytics]' (or pip install pandas)"
        ) from exc
    return pandas


@dataclass
class _Period:
    count: int = 0
    total: float = 0.0


class TrainingJobAnalytics:
    """A training job's metrics, read once and kept until ``clear_cache()``."""

    def __init__(
        self,
        training_job_name: str,
        metric_names: list[str] | None = None,
        sagemaker_session: object = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        period: int | None = None,
        *,
        client: Client | None = None,
    ) -> None:
        # ``sagemaker_session`` is the SDK's; here the client says which server.
        del sagemaker_session
        self.client = client or Client()
        self._name = training_job_name
        self._metric_names = metric_names
        self._start_time = start_time
        self._end_time = end_time
        self._period = period or DEFAULT_PERIOD
        if self._period < 1:
            raise ValueError(f"period: {period} is not a positive number of seconds")
        self._dataframe: pandas.DataFrame | None = None

    @property
    def name(self) -> str:
        """The training job's name."""
        return self._name

    def __repr__(self) -> str:
        return f"<runyard.TrainingJobAnalytics for {self.name}>"

    def clear_cache(self) -> None:
        """Forget what was read: the next ``dataframe()`` reads the job's metrics again."""
        self._dataframe = None

    def dataframe(self, force_refresh: bool = False) -> pandas.DataFrame:
        """The metrics: a row per metric and period, columns timestamp, metric_name and
        value."""
        if force_refresh:
            self.clear_cache()
        if self._dataframe is None:
            self._dataframe = self._fetch()
        return self._dataframe

    def export_csv(self, filename: str | Path) -> None:
        """Write ``dataframe()`` to a CSV file."""
        self.dataframe().to_csv(filename)

    def _fetch(self) -> pandas.DataFrame:
        pd = _pandas()
        job = self.client.get_job(self._name)
        names = self._metric_names or [item["name"] for item in job["spec"]["metric_definitions"]]
        began = job.get("training_start_time")
        start = self._start_time or (_moment(began) if began else None)
        end = self._end_time
        rows: dict[str, list[Any]] = {column: [] for column in COLUMNS}
        for name in names:
            for elapsed, value in self._averages(name, start, end):
                rows["timestamp"].append(elapsed)
                rows["metric_name"].append(name)
                rows["value"].append(value)
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def _averages(
        self, name: str, start: datetime | None, end: datetime | None
    ) -> list[tuple[float, float]]:
        """(seconds since the first period, the period's average) of each period of
        ``name`` that holds points."""
        [series] = self.client.metrics(
            self._name, metric=name, max_points=MAX_POINTS, start=start, end=end
        )
        points = [
            (_moment(point["time"]), float(point["value"]), point.get("count") or 1)
            for point in series["points"]
        ]
        if not points:
            return []
        anchor = _floor(start or min(time for time, _, _ in points), self._period)
        periods: dict[int, _Period] = {}
        for time, value, count in points:
            index = math.floor((time - anchor).total_seconds() / self._period)
            period = periods.setdefault(index, _Period())
            period.count += count
            period.total += value * count
        first = min(periods)
        return [
            (float((index - first) * self._period), periods[index].total / periods[index].count)
            for index in sorted(periods)
        ]


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _floor(moment: datetime, period: int) -> datetime:
    """As CloudWatch takes a start time: down to the minute, or for a period under a
    minute, down to the period."""
    step = period if period < MINUTE else MINUTE
    since_midnight = moment - moment.replace(hour=0, minute=0, second=0, microsecond=0)
    seconds = since_midnight.total_seconds()
    return moment - timedelta(seconds=seconds - math.floor(seconds / step) * step)


__all__ = ["TrainingJobAnalytics"]
