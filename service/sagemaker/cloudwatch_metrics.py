"""The CloudWatch operations the SageMaker SDK reads training metrics with
(``TrainingJobAnalytics``: GetMetricStatistics), and GetMetricData and ListMetrics.

As on SageMaker, each metric of a job's ``metric_definitions`` is published in the
namespace ``/aws/sagemaker/TrainingJobs`` with one dimension, ``TrainingJobName``, and no
unit; its points are the values the definitions found in the job's lines, all hosts
together. A metric exists once it has a point. A job the caller cannot see has no metrics
for it, so asking about one answers no data, as CloudWatch answers for a metric it does
not have.

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

from sqlalchemy import select

from service.auth.access import Role
from service.jobs import lookup
from service.jobs.models import JobFinalMetric, TrainingJob
from service.kit.db import from_micros, to_micros, utcnow
from service.kit.errors import NotFound
from service.metrics import statistics
from service.sagemaker import page_tokens, translate
from service.sagemaker.errors import AwsError
from service.sagemaker.training import Call, Operation

NAMESPACE = "/aws/sagemaker/TrainingJobs"
DIMENSION = "TrainingJobName"
UNIT = "None"
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
    job = _job_of(call, params["Namespace"], params.get("Dimensions") or [], params.get("Unit"))
    datapoints = []
    if job is not None and params["MetricName"] in _defined(job):
        budget = statistics.Budget(MAX_ROWS_READ)
        for period in _periods(call, job, params["MetricName"], window, bool(ranks), budget):
            point: dict[str, Any] = {"Timestamp": period.start, "Unit": UNIT}
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
    query = (
        select(TrainingJob.name, JobFinalMetric.name)
        .join(JobFinalMetric, JobFinalMetric.job_id == TrainingJob.id)
        .where(TrainingJob.project == principal.project, JobFinalMetric.time >= listed_since)
    )
    for dimension in params.get("Dimensions") or []:
        if dimension["Name"] != DIMENSION:
            return {"Metrics": []}
        if "Value" in dimension:
            query = query.where(TrainingJob.name == dimension["Value"])
    if "MetricName" in params:
        query = query.where(JobFinalMetric.name == params["MetricName"])
    query = query.order_by(TrainingJob.created_at, TrainingJob.id, JobFinalMetric.name)
    rows = list(call.session.execute(query.offset(offset).limit(METRICS_PAGE + 1)))
    answer: dict[str, Any] = {
        "Metrics": [
            {
                "Namespace": NAMESPACE,
                "MetricName": metric,
                "Dimensions": [{"Name": DIMENSION, "Value": job_name}],
            }
            for job_name, metric in rows[:METRICS_PAGE]
        ]
    }
    if params.get("IncludeLinkedAccounts"):
        account = translate.account_id(principal.project)
        answer["OwningAccounts"] = [account] * len(answer["Metrics"])
    if len(rows) > METRICS_PAGE:
        answer["NextToken"] = page_tokens.token(offset + METRICS_PAGE, digest)
    return answer


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
    metric = stat["Metric"]
    job = _job_of(
        call, metric.get("Namespace", ""), metric.get("Dimensions") or [], stat.get("Unit")
    )
    if job is None or metric.get("MetricName") not in _defined(job):
        return []
    periods = _periods(call, job, metric["MetricName"], window, rank is not None, budget)
    if rank is not None:
        return [(period.start, period.percentile(rank)) for period in periods]
    return [(period.start, _statistic(period, name)) for period in periods]


def _periods(
    call: Call,
    job: TrainingJob,
    name: str,
    window: Window,
    with_values: bool,
    budget: statistics.Budget,
) -> list[statistics.Period]:
    try:
        return statistics.per_period(
            call.session,
            job.id,
            name,
            start=window.start,
            end=window.end,
            seconds=window.seconds,
            budget=budget,
            with_values=with_values,
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


def _job_of(
    call: Call, namespace: str, dimensions: Sequence[Mapping[str, str]], unit: str | None
) -> TrainingJob | None:
    """The visible job whose metric the namespace, dimensions and unit name, if any: a
    metric is named by exactly its dimensions, as in CloudWatch."""
    if namespace != NAMESPACE or unit not in (None, UNIT):
        return None
    if len(dimensions) != 1 or dimensions[0]["Name"] != DIMENSION:
        return None
    try:
        return lookup.get(call.session, dimensions[0]["Value"], call.principal)
    except NotFound:
        return None


def _defined(job: TrainingJob) -> set[str]:
    return {item.name for item in job.record.metric_definitions}


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
