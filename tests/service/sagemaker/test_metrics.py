"""boto3's CloudWatch client reads the metrics of a job's ``metric_definitions`` as the
SageMaker SDK's TrainingJobAnalytics does (GetMetricStatistics on
/aws/sagemaker/TrainingJobs by TrainingJobName), and with GetMetricData and ListMetrics:
over AWS JSON 1.0 (what current botocore speaks to CloudWatch) and over the AWS Query
protocol (what botocore spoke before it), with CloudWatch's errors."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient

from service.sagemaker import cloudwatch_metrics
from service.settings import Settings
from tests.conftest import submit_for_instances
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import NO_RETRIES, REGION, UNCHECKED, check_answer, client
from tests.timeouts import REQUEST_TIMEOUT

NAMESPACE = "/aws/sagemaker/TrainingJobs"
DEFINITIONS = [
    {"name": "loss", "regex": "loss=([0-9.]+)"},
    # Defined, never printed: CloudWatch would never have heard of it.
    {"name": "accuracy", "regex": "accuracy=([0-9.]+)"},
]
# A whole minute, an hour ago: the lines below are stamped from it.
BASE = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
EVERY_STATISTIC = ["SampleCount", "Average", "Sum", "Minimum", "Maximum"]


def line(seq: int, seconds: float, message: str) -> dict[str, Any]:
    time = BASE + timedelta(seconds=seconds)
    return {"seq": seq, "time": time.isoformat(), "stream": "stdout", "message": message}


def printed(api: TestClient, settings: Settings, source: Path, name: str = "job-1") -> None:
    """Job ``name`` whose algo-1 printed loss 4, 2 (in the first minute) and 1 (in the
    second), and algo-2 loss 3 (in the first)."""
    headers = submit_for_instances(
        api, settings, source, name=name, instance_count=2, metric_definitions=DEFINITIONS
    )
    url = f"/v1/training-jobs/{name}/instances/{{}}/logs"
    one = [line(1, 0, "loss=4"), line(2, 10, "step loss=2"), line(3, 70, "loss=1")]
    assert api.post(url.format("algo-1"), json={"lines": one}, headers=headers).status_code == 200
    two = [line(1, 5, "loss=3")]
    response = api.post(url.format("algo-2"), json={"lines": two}, headers=headers.of("algo-2"))
    assert response.status_code == 200


@pytest.fixture
def cloudwatch(api: TestClient, server: str) -> Any:
    return client("cloudwatch", server, credentials(api))


def statistics_request(name: str = "job-1", **overrides: Any) -> dict[str, Any]:
    """GetMetricStatistics as the SageMaker SDK's TrainingJobAnalytics sends it."""
    request: dict[str, Any] = {
        "Namespace": NAMESPACE,
        "MetricName": "loss",
        "Dimensions": [{"Name": "TrainingJobName", "Value": name}],
        "StartTime": BASE,
        "EndTime": BASE + timedelta(minutes=3),
        "Period": 60,
        "Statistics": ["Average"],
    }
    request.update(overrides)
    return {key: value for key, value in request.items() if value is not None}


def data_query(query_id: str, stat: str, period: int, **extra: Any) -> dict[str, Any]:
    metric = {
        "Namespace": NAMESPACE,
        "MetricName": "loss",
        "Dimensions": [{"Name": "TrainingJobName", "Value": "job-1"}],
    }
    return {
        "Id": query_id,
        "MetricStat": {"Metric": metric, "Period": period, "Stat": stat},
        **extra,
    }


def averages(answer: dict[str, Any]) -> list[float]:
    return [point["Average"] for point in answer["Datapoints"]]


def error_of(call: Any, **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_statistics_per_period_over_every_host(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir)
    answer = cloudwatch.get_metric_statistics(**statistics_request(Statistics=EVERY_STATISTIC))
    check_answer(cloudwatch, "GetMetricStatistics", answer)
    assert answer["Label"] == "loss"
    assert [point.pop("Timestamp") for point in answer["Datapoints"]] == [
        BASE,
        BASE + timedelta(minutes=1),
    ]
    assert {point.pop("Unit") for point in answer["Datapoints"]} == {"None"}
    assert answer["Datapoints"] == [
        {"SampleCount": 3.0, "Average": 3.0, "Sum": 9.0, "Minimum": 2.0, "Maximum": 4.0},
        {"SampleCount": 1.0, "Average": 1.0, "Sum": 1.0, "Minimum": 1.0, "Maximum": 1.0},
    ]

    # Each value apart, as the SDK's analytics show them with a period of a second.
    answer = cloudwatch.get_metric_statistics(**statistics_request(Period=1))
    assert [(p["Timestamp"] - BASE, p["Average"]) for p in answer["Datapoints"]] == [
        (timedelta(seconds=s), v) for s, v in ((0, 4.0), (5, 3.0), (10, 2.0), (70, 1.0))
    ]
    # The start is rounded down to the minute; the end is exclusive, within a minute too
    # (read from the points; the whole minutes before it, from the per-minute rollups).
    late = statistics_request(StartTime=BASE + timedelta(seconds=30))
    late["EndTime"] = BASE + timedelta(seconds=70)
    assert averages(cloudwatch.get_metric_statistics(**late)) == [3.0]
    late["EndTime"] = BASE + timedelta(seconds=71)
    assert averages(cloudwatch.get_metric_statistics(**late)) == [3.0, 1.0]

    # Percentiles, nearest-rank, over the values of each period.
    asked = statistics_request(Statistics=None, ExtendedStatistics=["p50", "p100", "p0.0"])
    answer = cloudwatch.get_metric_statistics(**asked)
    check_answer(cloudwatch, "GetMetricStatistics", answer)
    assert [p["ExtendedStatistics"] for p in answer["Datapoints"]] == [
        {"p50": 3.0, "p100": 4.0, "p0.0": 2.0},
        {"p50": 1.0, "p100": 1.0, "p0.0": 1.0},
    ]


def test_what_cloudwatch_would_not_have_answers_no_data(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir)
    for other in (
        {"MetricName": "accuracy"},  # defined, never printed
        {"MetricName": "undefined"},
        {"Namespace": "AWS/EC2"},
        {"Unit": "Seconds"},  # SageMaker's metrics have no unit
        {"Dimensions": []},  # a metric is named by exactly its dimensions
        {"Dimensions": [{"Name": "Host", "Value": "job-1/algo-1"}]},
        {"Dimensions": [{"Name": "TrainingJobName", "Value": "no-such-job"}]},
    ):
        assert cloudwatch.get_metric_statistics(**statistics_request(**other))["Datapoints"] == []
    assert averages(cloudwatch.get_metric_statistics(**statistics_request(Unit="None"))) == [
        3.0,
        1.0,
    ]


def test_get_metric_data_answers_each_query_and_pages(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir)
    queries = [
        data_query("perminute", "Average", 60, Label="loss per minute"),
        data_query("raw", "Maximum", 1),
        data_query("hidden", "Sum", 60, ReturnData=False),
        data_query("median", "p50", 60),
    ]
    window = {"StartTime": BASE, "EndTime": BASE + timedelta(minutes=3)}
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=queries, ScanBy="TimestampAscending", **window
    )
    check_answer(cloudwatch, "GetMetricData", answer)
    results = {result["Id"]: result for result in answer["MetricDataResults"]}
    assert list(results) == ["perminute", "raw", "median"]
    assert results["perminute"]["Label"] == "loss per minute"
    assert results["raw"]["Label"] == "loss"
    assert results["perminute"]["Timestamps"] == [BASE, BASE + timedelta(minutes=1)]
    assert results["perminute"]["Values"] == [3.0, 1.0]
    assert results["raw"]["Values"] == [4.0, 3.0, 2.0, 1.0]
    assert results["median"]["Values"] == [3.0, 1.0]
    assert {r["StatusCode"] for r in results.values()} == {"Complete"}
    assert "NextToken" not in answer

    # The newest first unless asked otherwise; at most MaxDatapoints a page.
    pages = cloudwatch.get_paginator("get_metric_data").paginate(
        MetricDataQueries=queries[:2], PaginationConfig={"PageSize": 3}, **window
    )
    seen: dict[str, list[float]] = {"perminute": [], "raw": []}
    statuses = []
    for page in pages:
        for result in page["MetricDataResults"]:
            seen[result["Id"]] += result["Values"]
            statuses.append(result["StatusCode"])
    assert seen == {"perminute": [1.0, 3.0], "raw": [1.0, 2.0, 3.0, 4.0]}
    assert "PartialData" in statuses


def test_list_metrics_lists_what_jobs_printed(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir, "job-1")
    printed(api, settings, source_dir, "job-2")
    answer = cloudwatch.list_metrics(Namespace=NAMESPACE)
    check_answer(cloudwatch, "ListMetrics", answer)
    dimensions = [{"Name": "TrainingJobName", "Value": name} for name in ("job-1", "job-2")]
    assert answer["Metrics"] == [
        {"Namespace": NAMESPACE, "MetricName": "loss", "Dimensions": [dimension]}
        for dimension in dimensions
    ]
    only = cloudwatch.list_metrics(Dimensions=[{"Name": "TrainingJobName", "Value": "job-2"}])
    assert [m["Dimensions"] for m in only["Metrics"]] == [[dimensions[1]]]
    assert (
        cloudwatch.list_metrics(Dimensions=[{"Name": "TrainingJobName"}])["Metrics"]
        == (answer["Metrics"])
    )
    assert cloudwatch.list_metrics(MetricName="accuracy")["Metrics"] == []
    assert cloudwatch.list_metrics(Namespace="AWS/EC2")["Metrics"] == []
    assert cloudwatch.list_metrics(Dimensions=[{"Name": "Host"}])["Metrics"] == []
    # The lines were printed an hour ago: recently active, within three hours.
    assert len(cloudwatch.list_metrics(RecentlyActive="PT3H")["Metrics"]) == 2


def test_another_projects_jobs_have_no_metrics(
    cloudwatch: Any, api: TestClient, server: str, settings: Settings, source_dir: Path
) -> None:
    assert api.post("/v1/projects", json={"name": "vision"}).status_code == 201
    token = api.post("/v1/tokens", json={"name": "v", "project": "vision", "role": "viewer"})
    vision = client("cloudwatch", server, credentials(api, token.json()["token"]))
    printed(api, settings, source_dir)  # in the admin token's project, "default"
    assert averages(cloudwatch.get_metric_statistics(**statistics_request())) == [3.0, 1.0]
    assert vision.get_metric_statistics(**statistics_request())["Datapoints"] == []
    assert vision.list_metrics()["Metrics"] == []
    answer = vision.get_metric_data(
        MetricDataQueries=[data_query("loss", "Average", 60)],
        StartTime=BASE,
        EndTime=BASE + timedelta(minutes=3),
    )
    assert answer["MetricDataResults"][0]["Values"] == []


def test_bad_requests_are_cloudwatchs_errors(
    cloudwatch: Any, api: TestClient, server: str, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir)
    get = cloudwatch.get_metric_statistics
    code, message = error_of(get, **statistics_request(Period=7))
    assert (code, "Period" in message) == ("InvalidParameterValue", True)
    # botocore knows CloudWatch's modelled errors by their Query codes.
    with pytest.raises(cloudwatch.exceptions.InvalidParameterValueException):
        get(**statistics_request(Period=90))
    code, _ = error_of(get, **statistics_request(ExtendedStatistics=["p50"]))
    assert code == "InvalidParameterCombination"
    code, message = error_of(get, **statistics_request(Period=1, EndTime=BASE + timedelta(days=1)))
    assert code == "InvalidParameterCombination"
    assert "exceeds the limit of 1440" in message
    code, message = error_of(
        get, **statistics_request(Statistics=None, ExtendedStatistics=["tm90"])
    )
    assert (code, "ExtendedStatistics.member.1" in message) == ("ValidationError", True)
    code, message = error_of(get, **statistics_request(EndTime=BASE))
    assert (code, "StartTime" in message) == ("ValidationError", True)

    data = cloudwatch.get_metric_data
    window = {"StartTime": BASE, "EndTime": BASE + timedelta(minutes=3)}
    math = {"Id": "doubled", "Expression": "loss * 2"}
    code, message = error_of(data, MetricDataQueries=[math], **window)
    assert (code, "MetricDataQueries.member.1.Expression" in message) == ("ValidationError", True)
    code, message = error_of(data, MetricDataQueries=[data_query("a", "Median", 60)], **window)
    assert (code, "MetricDataQueries.member.1.MetricStat.Stat" in message) == (
        "ValidationError",
        True,
    )
    code, _ = error_of(data, MetricDataQueries=[data_query("Upper", "Sum", 60)], **window)
    assert code == "ValidationError"
    twice = [data_query("a", "Sum", 60), data_query("a", "Average", 60)]
    assert error_of(data, MetricDataQueries=twice, **window)[0] == "ValidationError"
    code, _ = error_of(
        data, MetricDataQueries=[data_query("a", "Sum", 60)], NextToken="nonsense", **window
    )
    assert code == "InvalidNextToken"
    assert error_of(cloudwatch.list_metrics, NextToken="nonsense")[0] == "InvalidNextToken"

    # What botocore would refuse before sending, refused by the server the same way.
    unchecked = client("cloudwatch", server, credentials(api), UNCHECKED)
    code, message = error_of(
        unchecked.get_metric_statistics, **statistics_request(MetricName="m" * 256)
    )
    assert (code, "metricName" in message) == ("ValidationError", True)


# -- the AWS Query protocol ----------------------------------------------------------------


@pytest.fixture
def query_cloudwatch(api: TestClient, server: str, tmp_path: Path) -> Any:
    """A botocore CloudWatch client that speaks AWS Query, as botocore did before
    CloudWatch's model offered JSON: botocore's own model with only that protocol."""
    loader = botocore.session.get_session().get_component("data_loader")
    model = copy.deepcopy(loader.load_service_model("cloudwatch", "service-2"))
    for key in ("protocols", "awsQueryCompatible", "jsonVersion", "targetPrefix"):
        model["metadata"].pop(key, None)
    model["metadata"]["protocol"] = "query"
    version = model["metadata"]["apiVersion"]
    folder = tmp_path / "models" / "cloudwatch" / version
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))
    session = botocore.session.get_session()  # its loader has read nothing yet
    session.get_component("data_loader").search_paths.insert(0, str(tmp_path / "models"))
    keys = credentials(api)
    cloudwatch = boto3.Session(
        botocore_session=session,
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
        region_name=REGION,
    ).client("cloudwatch", endpoint_url=server, config=NO_RETRIES)
    assert cloudwatch.meta.service_model.resolved_protocol == "query"
    return cloudwatch


def test_the_query_protocol_answers_as_json_does(
    query_cloudwatch: Any, cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    printed(api, settings, source_dir)
    request = statistics_request(Statistics=EVERY_STATISTIC)
    answer = query_cloudwatch.get_metric_statistics(**request)
    check_answer(query_cloudwatch, "GetMetricStatistics", answer)
    assert answer["Datapoints"] == cloudwatch.get_metric_statistics(**request)["Datapoints"]
    asked = statistics_request(Statistics=None, ExtendedStatistics=["p50", "p100"])
    assert [
        p["ExtendedStatistics"]
        for p in query_cloudwatch.get_metric_statistics(**asked)["Datapoints"]
    ] == [{"p50": 3.0, "p100": 4.0}, {"p50": 1.0, "p100": 1.0}]

    queries = [data_query("perminute", "Average", 60), data_query("raw", "Maximum", 1)]
    window = {"StartTime": BASE, "EndTime": BASE + timedelta(minutes=3)}
    answer = query_cloudwatch.get_metric_data(MetricDataQueries=queries, **window)
    check_answer(query_cloudwatch, "GetMetricData", answer)
    assert [r["Values"] for r in answer["MetricDataResults"]] == [[1.0, 3.0], [1.0, 2.0, 3.0, 4.0]]
    listed = query_cloudwatch.list_metrics(Namespace=NAMESPACE)
    assert listed["Metrics"] == cloudwatch.list_metrics(Namespace=NAMESPACE)["Metrics"]

    code, message = error_of(query_cloudwatch.get_metric_statistics, **statistics_request(Period=7))
    assert (code, "Period" in message) == ("InvalidParameterValue", True)


def test_a_query_form_the_model_does_not_have_is_refused_naming_it(
    api: TestClient, server: str
) -> None:
    keys = credentials(api)

    def post(form: str) -> httpx.Response:
        request = AWSRequest(
            method="POST",
            url=server + "/",
            data=form.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        )
        SigV4Auth(
            Credentials(keys["access_key_id"], keys["secret_access_key"]), "monitoring", REGION
        ).add_auth(request)
        return httpx.post(
            server + "/",
            content=form.encode(),
            headers=dict(request.headers),
            timeout=REQUEST_TIMEOUT,
        )

    listed = post("Action=ListMetrics&Version=2010-08-01")
    assert listed.status_code == 200, listed.text
    assert listed.text.startswith("<ListMetricsResponse")
    unknown = post("Action=ListMetrics&Version=2010-08-01&Surprise=1")
    assert unknown.status_code == 400
    assert "<Code>ValidationError</Code>" in unknown.text
    assert "Surprise" in unknown.text
    nested = post("Action=ListMetrics&Version=2010-08-01&Dimensions.member.1.Colour=red")
    assert "Dimensions.member.1.Colour" in nested.text
    # A list index that is not a small number of ASCII digits names no item.
    for index in ("%C2%B2", "1" * 5000, "0"):
        odd = post(f"Action=ListMetrics&Version=2010-08-01&Dimensions.member.{index}.Name=x")
        assert odd.status_code == 400, odd.text
        assert "<Code>ValidationError</Code>" in odd.text
    action = post("Action=PutMetricData&Version=2010-08-01")
    assert "<Code>UnknownOperationException</Code>" in action.text
    # Signed for another service: refused, in XML.
    request = AWSRequest(
        method="POST", url=server + "/", data=b"Action=ListMetrics&Version=2010-08-01"
    )
    request.headers["Content-Type"] = "application/x-www-form-urlencoded"
    SigV4Auth(
        Credentials(keys["access_key_id"], keys["secret_access_key"]), "sagemaker", REGION
    ).add_auth(request)
    wrong = httpx.post(
        server + "/", content=request.body, headers=dict(request.headers), timeout=REQUEST_TIMEOUT
    )
    assert wrong.status_code == 400
    assert "<Code>InvalidSignatureException</Code>" in wrong.text


def test_what_a_request_may_read_is_bounded(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    cloudwatch: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed(api, settings, source_dir)
    window = {"StartTime": BASE, "EndTime": BASE + timedelta(minutes=3)}
    # A query that names no metric (CloudWatch's model allows it) finds nothing.
    nameless = data_query("m", "Sum", 60)
    del nameless["MetricStat"]["Metric"]["MetricName"]
    [result] = cloudwatch.get_metric_data(MetricDataQueries=[nameless], **window)[
        "MetricDataResults"
    ]
    assert (result["Label"], result["Values"]) == ("", [])
    # Four points are stored: a budget of three rows refuses rather than reads on.
    monkeypatch.setattr(cloudwatch_metrics, "MAX_ROWS_READ", 3)
    code, message = error_of(
        cloudwatch.get_metric_data, MetricDataQueries=[data_query("p", "p50", 1)], **window
    )
    assert code == "InvalidParameterCombination"
    assert "more than 3 stored rows" in message
    code, _message = error_of(
        cloudwatch.get_metric_statistics, **statistics_request(Period=1, Statistics=["Sum"])
    )
    assert code == "InvalidParameterCombination"
    monkeypatch.setattr(cloudwatch_metrics, "MAX_ROWS_READ", 4)
    answer = cloudwatch.get_metric_data(MetricDataQueries=[data_query("p", "p50", 1)], **window)
    assert len(answer["MetricDataResults"][0]["Values"]) == 4
