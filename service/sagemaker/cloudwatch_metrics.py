"""The CloudWatch operations the SageMaker SDK reads training metrics with
(``TrainingJobAnalytics``: GetMetricStatistics), and GetMetricData and ListMetrics.

As on SageMaker, each metric of a job's ``metric_definitions`` is published in the
namespace ``/aws/sagemaker/TrainingJobs`` with one dimension, ``TrainingJobName``, and no
unit; its points are the values the definitions found in the job's lines, all hosts
together. A metric exists once it has a point. A job the caller cannot see has no metrics
for it, so asking about one answers no data, as CloudWatch answers for a metric it does
not have.

Each instance's own metrics (CPUUtilization, MemoryUtilization, DiskUtilization,
GPUUtilization, GPUMemoryUtilization) are published in the same namespace as on
SageMaker: with one dimension, ``Host``, whose value is ``<job name>/<host>`` (for
example ``my-job/algo-1``), and a unit of Percent.

Times follow CloudWatch: the start is rounded down to the minute (for periods under a
minute, to the period), the end is exclusive, and each datapoint is stamped with the
start of its period. Percentiles (``p90``, ``p99.9``) are nearest-rank over the period's
values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, literal, select, union_all

from service.auth.access import Role
from service.jobs import lookup
from service.jobs.models import JobFinalMetric, MetricRollup, TrainingJob
from service.jobs.spec_parts import INSTANCE_METRIC_PREFIX
from service.kit.db import from_micros, to_micros, utcnow
from service.kit.errors import NotFound
from service.metrics import instance, statistics
from service.metrics.rollups import minute_of
from service.sagemaker import page_tokens, translate
from service.sagemaker.errors import AwsError
from service.sagemaker.training import Call, Operation

NAMESPACE = "/aws/sagemaker/TrainingJobs"
DIMENSION = "TrainingJobName"
HOST_DIMENSION = "Host"
UNIT = "None"
INSTANCE_UNIT = "Percent"
# CloudWatch's limits: datapoints one GetMetricStatistics may answer with, queries and
# datapoints of one GetMetricData, metrics of one ListMetrics page.
MAX_STATISTICS_POINTS = 1440
MAX_QUERIES = 500
MAX_DATA_POINTS = 100_800
# The stored rows (points, per-minute rollups) one request may read, all its queries
# together: a year of percentiles over a job that logs every second is refused, not read.
MAX_ROWS_READ = 200_000
METRICS_PAGE = 500
# Periods under a minute that CloudWatch takes (high-resolution metrics; every point
# Runyard stores keeps its own time, so its metrics are).
SHORT_PERIODS = (1, 5, 10, 20, 30)
# ListMetrics shows metrics with a point in the last two weeks; RecentlyActive=PT3H, in
# the last three hours.
LISTED_FOR = timedelta(days=14)
RECENTLY = timedelta(hours=3)
STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
_PERCENTILE = re.compile(r"p(?P<rank>[0-9]{1,3}(\.[0-9]+)?)")
_QUERY_ID = re.compile(r"[a-z][a-zA-Z0-9_]*")


def get_metric_statistics(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _require_reader(call)
    asked = params.get("Statistics") or []
    extended = params.get("ExtendedStatistics") or []
    if bool(asked) == bool(extended):
        raise AwsError(
            "InvalidParameterCombination",
            "Exactly one of the parameters Statistics and ExtendedStatistics must be given.",
        )
    ranks = {
        name: _percentile(name, f"ExtendedStatistics.member.{index}")
        for index, name in enumerate(extended, start=1)
    }
    window = _window(params["StartTime"], params["EndTime"], params["Period"], "Period")
    if window.periods > MAX_STATISTICS_POINTS:
        raise AwsError(
            "InvalidParameterCombination",
            f"You have requested up to {window.periods} datapoints, which exceeds the limit "
            f"of {MAX_STATISTICS_POINTS}. You may reduce the datapoints requested by "
            "increasing Period, or decreasing the time range.",
        )
    metric = _metric_of(
        call,
        params["Namespace"],
        params["MetricName"],
        params.get("Dimensions") or [],
        params.get("Unit"),
    )
    datapoints = []
    if metric is not None:
        budget = statistics.Budget(MAX_ROWS_READ)
        for period in _periods(call, metric, window, bool(ranks), budget):
            point: dict[str, Any] = {"Timestamp": period.start, "Unit": metric.unit}
            point.update({name: _statistic(period, name) for name in asked})
            if ranks:
                point["ExtendedStatistics"] = {
                    name: period.percentile(rank) for name, rank in ranks.items()
                }
            datapoints.append(point)
    return {"Label": params["MetricName"], "Datapoints": datapoints}


def get_metric_data(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _require_reader(call)
    queries = params["MetricDataQueries"]
    if not queries or len(queries) > MAX_QUERIES:
        raise _invalid(f"MetricDataQueries must hold 1 to {MAX_QUERIES} queries.")
    ids = [query["Id"] for query in queries]
    for index, query_id in enumerate(ids, start=1):
        if not _QUERY_ID.fullmatch(query_id):
            raise _invalid(
                f"The value {query_id[:64]} for parameter MetricDataQueries.member.{index}.Id "
                "is not valid: it must start with a lowercase letter, then letters, digits "
                "and underscores."
            )
    if len(set(ids)) != len(ids):
        raise _invalid("The values for parameter Id in MetricDataQueries are not unique.")
    start, end = params["StartTime"], params["EndTime"]
    budget = statistics.Budget(MAX_ROWS_READ)
    series = [
        _series(call, query, start, end, f"MetricDataQueries.member.{index}", budget)
        for index, query in enumerate(queries, start=1)
    ]
    shown = [
        (query, points)
        for query, points in zip(queries, series, strict=True)
        if query.get("ReturnData", True)
    ]
    if params.get("ScanBy", "TimestampDescending") == "TimestampDescending":
        shown = [(query, points[::-1]) for query, points in shown]
    digest = page_tokens.digest(params, ("NextToken", "MaxDatapoints"))
    offset = page_tokens.offset_in(params, digest, _bad_token())
    room = params.get("MaxDatapoints", MAX_DATA_POINTS)
    if room < 1:
        raise _invalid("The parameter MaxDatapoints must be greater than 0.")
    results, more = _page(shown, offset, room)
    answer: dict[str, Any] = {"MetricDataResults": results, "Messages": []}
    if more:
        answer["NextToken"] = page_tokens.token(offset + room, digest)
    return answer


def _page(
    shown: list[tuple[Mapping[str, Any], list[tuple[datetime, float]]]], offset: int, room: int
) -> tuple[list[dict[str, Any]], bool]:
    """Each query's part of the ``room`` datapoints from ``offset`` on, counting the
    queries' datapoints one after another; and whether any are left for another page."""
    results, seen, more = [], 0, False
    for query, points in shown:
        first = min(max(offset - seen, 0), len(points))
        last = min(max(offset + room - seen, 0), len(points))
        seen += len(points)
        partial = last < len(points)
        more = more or partial
        page = points[first:last]
        results.append(
            {
                "Id": query["Id"],
                "Label": query.get("Label") or _metric_name(query),
                "Timestamps": [time for time, _value in page],
                "Values": [value for _time, value in page],
                "StatusCode": "PartialData" if partial else "Complete",
                "Messages": [],
            }
        )
    return results, more


def list_metrics(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _require_reader(call)
    principal = call.principal
    digest = page_tokens.digest(params, ("NextToken",))
    offset = page_tokens.offset_in(params, digest, _bad_token())
    if params.get("Namespace", NAMESPACE) != NAMESPACE:
        return {"Metrics": []}
    listed_since = utcnow() - (RECENTLY if params.get("RecentlyActive") else LISTED_FOR)
    dimensions = params.get("Dimensions") or []
    if len(dimensions) > 1 or any(
        item["Name"] not in (DIMENSION, HOST_DIMENSION) for item in dimensions
    ):
        return {"Metrics": []}  # no metric here has two dimensions, or another one
    listed = [
        query
        for query in (
            _job_metrics(principal.project, listed_since, params, dimensions),
            _instance_metrics(principal.project, listed_since, params, dimensions),
        )
        if query is not None
    ]
    if not listed:
        return {"Metrics": []}
    both = union_all(*listed).subquery()
    query = select(both.c.job_name, both.c.metric, both.c.host).order_by(
        both.c.created_at, both.c.job_id, both.c.host, both.c.metric
    )
    rows = list(call.session.execute(query.offset(offset).limit(METRICS_PAGE + 1)))
    answer: dict[str, Any] = {
        "Metrics": [
            _listed(job_name, metric, host) for job_name, metric, host in rows[:METRICS_PAGE]
        ]
    }
    if params.get("IncludeLinkedAccounts"):
        account = translate.account_id(principal.project)
        answer["OwningAccounts"] = [account] * len(answer["Metrics"])
    if len(rows) > METRICS_PAGE:
        answer["NextToken"] = page_tokens.token(offset + METRICS_PAGE, digest)
    return answer


# A metric ListMetrics lists: its job's creation and id (the order), the job's name, the
# metric's stored name, and its host ("" for one of the job's own).
_Listing = Select[datetime, str, str, str, str]


def _job_metrics(
    project: str,
    since: datetime,
    params: Mapping[str, Any],
    dimensions: Sequence[Mapping[str, str]],
) -> _Listing | None:
    """The metrics of the jobs' ``metric_definitions`` that ListMetrics asks for, a row
    each, as ``_instance_metrics``' rows."""
    if dimensions and dimensions[0]["Name"] != DIMENSION:
        return None
    query = (
        select(
            TrainingJob.created_at,
            TrainingJob.id.label("job_id"),
            TrainingJob.name.label("job_name"),
            JobFinalMetric.name.label("metric"),
            literal("").label("host"),
        )
        .join(JobFinalMetric, JobFinalMetric.job_id == TrainingJob.id)
        .where(TrainingJob.project == project, JobFinalMetric.time >= since)
    )
    if dimensions and "Value" in dimensions[0]:
        query = query.where(TrainingJob.name == dimensions[0]["Value"])
    if "MetricName" in params:
        query = query.where(JobFinalMetric.name == params["MetricName"])
    return query


def _instance_metrics(
    project: str,
    since: datetime,
    params: Mapping[str, Any],
    dimensions: Sequence[Mapping[str, str]],
) -> _Listing | None:
    """The instance metrics that ListMetrics asks for, a row per host and metric with a
    point since ``since`` (read from the per-minute rollups)."""
    if dimensions and dimensions[0]["Name"] != HOST_DIMENSION:
        return None
    names = list(instance.STORED_NAMES)
    if "MetricName" in params:
        names = [name for name in names if name == INSTANCE_METRIC_PREFIX + params["MetricName"]]
    query = (
        select(
            TrainingJob.created_at,
            TrainingJob.id.label("job_id"),
            TrainingJob.name.label("job_name"),
            MetricRollup.name.label("metric"),
            MetricRollup.host.label("host"),
        )
        .join(MetricRollup, MetricRollup.job_id == TrainingJob.id)
        .where(
            TrainingJob.project == project,
            MetricRollup.name.in_(names),
            MetricRollup.minute >= minute_of(since),
        )
        .distinct()
    )
    if dimensions and "Value" in dimensions[0]:
        job_name, _, host = dimensions[0]["Value"].rpartition("/")
        query = query.where(TrainingJob.name == job_name, MetricRollup.host == host)
    return query


def _listed(job_name: str, metric: str, host: str) -> dict[str, Any]:
    if not host:
        dimension = {"Name": DIMENSION, "Value": job_name}
    else:
        metric = metric.removeprefix(INSTANCE_METRIC_PREFIX)
        dimension = {"Name": HOST_DIMENSION, "Value": f"{job_name}/{host}"}
    return {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": [dimension]}


# -- one metric's values -----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The periods asked for: from a rounded-down start, ``seconds`` long, up to an
    exclusive end."""

    start: datetime
    end: datetime
    seconds: int

    @property
    def periods(self) -> int:
        return math.ceil((self.end - self.start).total_seconds() / self.seconds)


def _window(start_s: float, end_s: float, seconds: int, member: str) -> Window:
    if seconds not in SHORT_PERIODS and seconds % 60:
        raise AwsError(
            "InvalidParameterValue",
            f"The parameter {member} must be 1, 5, 10, 20, 30, or a multiple of 60.",
        )
    start, end = _time(start_s, "StartTime"), _time(end_s, "EndTime")
    if start >= end:
        raise _invalid("The parameter StartTime must be less than the parameter EndTime.")
    step = min(seconds, 60) * 1_000_000
    micros = to_micros(start)
    return Window(start=from_micros(micros - micros % step), end=end, seconds=seconds)


def _metric_name(query: Mapping[str, Any]) -> str:
    # Optional in CloudWatch's model: a query may name none (and then finds nothing).
    return str(query.get("MetricStat", {}).get("Metric", {}).get("MetricName", ""))


def _series(
    call: Call,
    query: Mapping[str, Any],
    start_s: float,
    end_s: float,
    path: str,
    budget: statistics.Budget,
) -> list[tuple[datetime, float]]:
    """The (time, value) points of one query of GetMetricData, in time order."""
    if "Expression" in query:
        raise _invalid(
            f"{path}.Expression: metric math and Metrics Insights queries are not served "
            "here; ask for each metric with MetricStat"
        )
    if "MetricStat" not in query:
        raise _invalid(f"{path}: a query needs a MetricStat.")
    stat = query["MetricStat"]
    name = stat["Stat"]
    rank = None
    if name not in STATISTICS:
        rank = _percentile(name, f"{path}.MetricStat.Stat")
    window = _window(start_s, end_s, stat["Period"], f"{path}.MetricStat.Period")
    asked = stat["Metric"]
    metric = _metric_of(
        call,
        asked.get("Namespace", ""),
        asked.get("MetricName", ""),
        asked.get("Dimensions") or [],
        stat.get("Unit"),
    )
    if metric is None:
        return []
    periods = _periods(call, metric, window, rank is not None, budget)
    if rank is not None:
        return [(period.start, period.percentile(rank)) for period in periods]
    return [(period.start, _statistic(period, name)) for period in periods]


def _periods(
    call: Call,
    metric: _Metric,
    window: Window,
    with_values: bool,
    budget: statistics.Budget,
) -> list[statistics.Period]:
    try:
        return statistics.per_period(
            call.session,
            metric.job.id,
            metric.stored_name,
            start=window.start,
            end=window.end,
            seconds=window.seconds,
            budget=budget,
            with_values=with_values,
            host=metric.host,
        )
    except statistics.TooManyRows as exc:
        raise AwsError(
            "InvalidParameterCombination",
            f"The request would read {exc} of the job's metrics. You may reduce it by "
            "decreasing the time range, asking for fewer metrics, or using Periods of whole "
            "minutes without percentiles.",
        ) from None


def _statistic(period: statistics.Period, name: str) -> float:
    values = {
        "SampleCount": float(period.count),
        "Average": period.average,
        "Sum": period.total,
        "Minimum": period.low,
        "Maximum": period.high,
    }
    return values[name]


@dataclass(frozen=True)
class _Metric:
    """A metric a request names: of a visible job, as stored, of one host or all."""

    job: TrainingJob
    stored_name: str
    host: str | None
    unit: str


def _metric_of(
    call: Call,
    namespace: str,
    name: str,
    dimensions: Sequence[Mapping[str, str]],
    unit: str | None,
) -> _Metric | None:
    """The metric of a visible job that the namespace, name, dimensions and unit name, if
    any: a metric is named by exactly its dimensions, as in CloudWatch. A job's own by
    TrainingJobName, an instance's by Host."""
    if namespace != NAMESPACE or len(dimensions) != 1:
        return None
    dimension, value = dimensions[0]["Name"], dimensions[0]["Value"]
    if dimension == DIMENSION and unit in (None, UNIT):
        job = _visible_job(call, value)
        if job is None or name not in {item.name for item in job.record.metric_definitions}:
            return None
        return _Metric(job, name, None, UNIT)
    if dimension == HOST_DIMENSION and unit in (None, INSTANCE_UNIT):
        job_name, _, host = value.rpartition("/")
        metric = instance.metric_of(INSTANCE_METRIC_PREFIX + name)
        job = _visible_job(call, job_name) if metric is not None else None
        if job is None or host not in lookup.hosts(job):
            return None
        return _Metric(job, INSTANCE_METRIC_PREFIX + name, host, INSTANCE_UNIT)
    return None


def _visible_job(call: Call, name: str) -> TrainingJob | None:
    try:
        return lookup.get(call.session, name, call.principal)
    except NotFound:
        return None


def _percentile(name: str, member: str) -> float:
    match = _PERCENTILE.fullmatch(name)
    if match is None or float(match.group("rank")) > 100:
        raise _invalid(
            f"The value {name[:64]} for parameter {member} is not a valid statistic: "
            f"{', '.join(STATISTICS)} or a percentile p0.0 to p100 are served here."
        )
    return float(match.group("rank"))


# -- checks, times and tokens ------------------------------------------------------------


def _require_reader(call: Call) -> None:
    call.principal.require(Role.VIEWER, call.principal.project, "reading metrics")


def _time(epoch_seconds: float, member: str) -> datetime:
    try:
        return datetime.fromtimestamp(epoch_seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise _invalid(f"The parameter {member} is out of range.") from None


def _bad_token() -> AwsError:
    return AwsError("InvalidNextToken", "The service couldn't process the NextToken given.")


def _invalid(message: str) -> AwsError:
    # CloudWatch's code for a request that breaks its rules.
    return AwsError("ValidationError", message)


OPERATIONS: dict[str, Operation] = {
    "GetMetricStatistics": get_metric_statistics,
    "GetMetricData": get_metric_data,
    "ListMetrics": list_metrics,
}
