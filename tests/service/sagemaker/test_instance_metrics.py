"""boto3's CloudWatch client reads each instance's own metrics as SageMaker publishes
them: in /aws/sagemaker/TrainingJobs, by the dimension Host = ``<job>/<host>``, in
Percent; one host's values never mixed with another's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.conftest import submit_for_instances
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import check_answer, client

NAMESPACE = "/aws/sagemaker/TrainingJobs"
BASE = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)


def _at(seconds: float) -> float:
    return (BASE + timedelta(seconds=seconds)).timestamp()


def _host(job: str, host: str) -> list[dict[str, str]]:
    return [{"Name": "Host", "Value": f"{job}/{host}"}]


@pytest.fixture
def cloudwatch(api: TestClient, server: str) -> Any:
    return client("cloudwatch", server, credentials(api))


def measured(api: TestClient, settings: Settings, source: Path, name: str = "job-1") -> None:
    """algo-1 of job ``name`` used 100% CPU then 300% (in the first minute) and 50% (in
    the second); algo-2 10%; each, some memory; the job also printed a loss."""
    headers = submit_for_instances(
        api,
        settings,
        source,
        name=name,
        instance_count=2,
        metric_definitions=[{"name": "loss", "regex": "loss=([0-9.]+)"}],
    )
    url = f"/v1/training-jobs/{name}/instances/{{}}/metrics"
    one = [
        [_at(0), "CPUUtilization", 100.0],
        [_at(10), "CPUUtilization", 300.0],
        [_at(70), "CPUUtilization", 50.0],
        [_at(0), "MemoryUtilization", 40.0],
    ]
    two = [[_at(5), "CPUUtilization", 10.0], [_at(5), "MemoryUtilization", 20.0]]
    for host, rows in (("algo-1", one), ("algo-2", two)):
        response = api.post(url.format(host), json={"rows": rows}, headers=headers.of(host))
        assert response.status_code == 200, response.text
    line = {"seq": 1, "time": BASE.isoformat(), "stream": "stdout", "message": "loss=2"}
    response = api.post(
        f"/v1/training-jobs/{name}/instances/algo-1/logs", json={"lines": [line]}, headers=headers
    )
    assert response.status_code == 200, response.text


def test_statistics_per_host(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    measured(api, settings, source_dir)
    request = {
        "Namespace": NAMESPACE,
        "MetricName": "CPUUtilization",
        "Dimensions": _host("job-1", "algo-1"),
        "StartTime": BASE,
        "EndTime": BASE + timedelta(minutes=3),
        "Period": 60,
        "Statistics": ["Average", "Maximum", "SampleCount"],
    }
    answer = cloudwatch.get_metric_statistics(**request)
    check_answer(cloudwatch, "GetMetricStatistics", answer)
    assert answer["Datapoints"] == [
        {
            "Timestamp": BASE,
            "Average": 200.0,
            "Maximum": 300.0,
            "SampleCount": 2.0,
            "Unit": "Percent",
        },
        {
            "Timestamp": BASE + timedelta(minutes=1),
            "Average": 50.0,
            "Maximum": 50.0,
            "SampleCount": 1.0,
            "Unit": "Percent",
        },
    ]
    request["Dimensions"] = _host("job-1", "algo-2")
    assert [p["Average"] for p in cloudwatch.get_metric_statistics(**request)["Datapoints"]] == [
        10.0
    ]
    # What SageMaker does not publish answers no data: a host the job does not have, a
    # metric by the job's name, another unit.
    for wrong in (
        {"Dimensions": _host("job-1", "algo-3")},
        {"Dimensions": _host("job-9", "algo-1")},
        {"Dimensions": [{"Name": "TrainingJobName", "Value": "job-1"}]},
        {"Unit": "Seconds"},
        {"MetricName": "FanSpeed"},
    ):
        assert cloudwatch.get_metric_statistics(**{**request, **wrong})["Datapoints"] == []


def test_get_metric_data_per_host(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    measured(api, settings, source_dir)

    def query(query_id: str, metric: str, host: str) -> dict[str, Any]:
        stat = {
            "Metric": {
                "Namespace": NAMESPACE,
                "MetricName": metric,
                "Dimensions": _host("job-1", host),
            },
            "Period": 1,
            "Stat": "Maximum",
        }
        return {"Id": query_id, "MetricStat": stat}

    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[
            query("cpu1", "CPUUtilization", "algo-1"),
            query("mem2", "MemoryUtilization", "algo-2"),
        ],
        StartTime=BASE,
        EndTime=BASE + timedelta(minutes=3),
        ScanBy="TimestampAscending",
    )
    check_answer(cloudwatch, "GetMetricData", answer)
    found = {r["Id"]: r["Values"] for r in answer["MetricDataResults"]}
    assert found == {"cpu1": [100.0, 300.0, 50.0], "mem2": [20.0]}


def test_list_metrics_lists_each_hosts(
    cloudwatch: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    measured(api, settings, source_dir)
    answer = cloudwatch.list_metrics(Namespace=NAMESPACE)
    check_answer(cloudwatch, "ListMetrics", answer)
    listed = [(m["MetricName"], m["Dimensions"]) for m in answer["Metrics"]]
    assert listed == [
        ("loss", [{"Name": "TrainingJobName", "Value": "job-1"}]),
        ("CPUUtilization", _host("job-1", "algo-1")),
        ("MemoryUtilization", _host("job-1", "algo-1")),
        ("CPUUtilization", _host("job-1", "algo-2")),
        ("MemoryUtilization", _host("job-1", "algo-2")),
    ]
    only = cloudwatch.list_metrics(Dimensions=_host("job-1", "algo-2"))
    assert [m["MetricName"] for m in only["Metrics"]] == ["CPUUtilization", "MemoryUtilization"]
    cpu = cloudwatch.list_metrics(MetricName="CPUUtilization", Dimensions=[{"Name": "Host"}])
    assert [m["Dimensions"] for m in cpu["Metrics"]] == [
        _host("job-1", "algo-1"),
        _host("job-1", "algo-2"),
    ]
    assert cloudwatch.list_metrics(MetricName="GPUUtilization")["Metrics"] == []
