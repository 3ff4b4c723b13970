"""Instance metrics on the service: the route an instance's runtime sends its samples to
(validated, authenticated as the instance, safe to retry) and the metrics route serving
them per host with ``kind=instance``, apart from the job's own metrics."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from contract.protocol import MAX_INSTANCE_METRIC_ROWS
from service.settings import Settings
from tests.conftest import InstanceHeaders, submit_for_instances

JOB = "/v1/training-jobs/job-1"
BASE = (datetime.now(UTC) - timedelta(minutes=30)).replace(microsecond=0)


def _at(seconds: float) -> float:
    return (BASE + timedelta(seconds=seconds)).timestamp()


def _send(api: TestClient, headers: InstanceHeaders, host: str, rows: list[Any]) -> Any:
    return api.post(
        f"{JOB}/instances/{host}/metrics",
        content=json.dumps({"rows": rows}),
        headers={**headers.of(host), "Content-Type": "application/json"},
    )


@pytest.fixture
def headers(api: TestClient, settings: Settings, source_dir: Path) -> InstanceHeaders:
    return submit_for_instances(
        api,
        settings,
        source_dir,
        name="job-1",
        instance_count=2,
        metric_definitions=[{"name": "loss", "regex": "loss=([0-9.]+)"}],
    )


def test_samples_are_served_per_host_apart_from_the_jobs_metrics(
    api: TestClient, headers: InstanceHeaders
) -> None:
    one = [
        [_at(0), "CPUUtilization", 150.5],
        [_at(0), "MemoryUtilization", 12.25],
        [_at(10), "CPUUtilization", 90.0],
    ]
    answer = _send(api, headers, "algo-1", one)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"stored": 3}
    # A batch sent again (its answer lost) is stored once.
    assert _send(api, headers, "algo-1", one).json() == {"stored": 0}
    assert _send(api, headers, "algo-2", [[_at(5), "CPUUtilization", 20.0]]).json() == {"stored": 1}

    response = api.get(f"{JOB}/metrics", params={"kind": "instance"})
    assert response.status_code == 200, response.text
    served = {
        series["name"]: [(p["host"], p["value"]) for p in series["points"]]
        for series in response.json()["metrics"]
    }
    assert served == {
        "CPUUtilization": [("algo-1", 150.5), ("algo-2", 20.0), ("algo-1", 90.0)],
        "MemoryUtilization": [("algo-1", 12.25)],
    }
    first = response.json()["metrics"][0]["points"][0]
    assert datetime.fromisoformat(first["time"]) == BASE

    only = api.get(f"{JOB}/metrics", params={"kind": "instance", "name": "MemoryUtilization"})
    assert [series["name"] for series in only.json()["metrics"]] == ["MemoryUtilization"]
    # Downsampled, each host apart.
    sampled = api.get(f"{JOB}/metrics", params={"kind": "instance", "max_points": 1})
    hosts = {p["host"] for p in sampled.json()["metrics"][0]["points"]}
    assert hosts == {"algo-1", "algo-2"}
    # The job's own metrics are its definitions', never the instances'.
    own = api.get(f"{JOB}/metrics").json()["metrics"]
    assert [(series["name"], series["points"]) for series in own] == [("loss", [])]

    missing = api.get(f"{JOB}/metrics", params={"kind": "instance", "name": "GPUUtilization"})
    assert missing.status_code == 404
    assert "GPUUtilization" in missing.json()["detail"]
    bad = api.get(f"{JOB}/metrics", params={"kind": "gpu"})
    assert bad.status_code == 422


BAD_BODIES: list[tuple[str, Any, list[Any]]] = [
    ("no rows", {"rows": []}, ["body", "rows"]),
    ("rows missing", {}, ["body", "rows"]),
    ("unknown metric", {"rows": [[1.0, "FanSpeed", 1.0]]}, ["body", "rows", 0, 1]),
    ("negative value", {"rows": [[1.0, "CPUUtilization", -1.0]]}, ["body", "rows", 0, 2]),
    ("huge value", {"rows": [[1.0, "CPUUtilization", 1e12]]}, ["body", "rows", 0, 2]),
    ("not a number", {"rows": [[1.0, "CPUUtilization", "high"]]}, ["body", "rows", 0, 2]),
    ("negative time", {"rows": [[-5.0, "CPUUtilization", 1.0]]}, ["body", "rows", 0, 0]),
    ("time past 9999", {"rows": [[1e15, "CPUUtilization", 1.0]]}, ["body", "rows", 0, 0]),
    ("short row", {"rows": [[1.0, "CPUUtilization"]]}, ["body", "rows", 0, 2]),
    ("extra key", {"rows": [[1.0, "CPUUtilization", 1.0]], "unit": "%"}, ["body", "unit"]),
    (
        "too many rows",
        {"rows": [[1.0, "CPUUtilization", 1.0]] * (MAX_INSTANCE_METRIC_ROWS + 1)},
        ["body", "rows"],
    ),
]


@pytest.mark.parametrize(
    ("body", "where"), [case[1:] for case in BAD_BODIES], ids=[case[0] for case in BAD_BODIES]
)
def test_bad_bodies_are_refused_naming_the_field(
    api: TestClient, headers: InstanceHeaders, body: Any, where: list[Any]
) -> None:
    response = api.post(
        f"{JOB}/instances/algo-1/metrics",
        json=body,
        headers=headers.of("algo-1"),
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == where


def test_not_a_number_is_refused(api: TestClient, headers: InstanceHeaders) -> None:
    # json.dumps writes NaN, which JSON does not have: refused, not stored.
    response = _send(api, headers, "algo-1", [[_at(0), "CPUUtilization", math.nan]])
    assert response.status_code == 422, response.text


def test_only_the_instance_itself_sends_its_samples(
    api: TestClient, headers: InstanceHeaders
) -> None:
    rows = [[_at(0), "CPUUtilization", 1.0]]
    # algo-2's token does not speak for algo-1.
    response = api.post(
        f"{JOB}/instances/algo-1/metrics", json={"rows": rows}, headers=headers.of("algo-2")
    )
    assert response.status_code == 403, response.text
    anonymous = api.post(
        f"{JOB}/instances/algo-1/metrics",
        json={"rows": rows},
        headers={"Authorization": "Bearer nope"},
    )
    assert anonymous.status_code == 401
    assert api.get(f"{JOB}/metrics", params={"kind": "instance"}).json() == {"metrics": []}


@pytest.mark.parametrize("seconds", [0.5, -1, 3601])
def test_the_sampling_interval_is_a_second_to_an_hour_or_never(
    tmp_path: Path, seconds: float
) -> None:
    with pytest.raises(ValidationError, match="instance_metrics_seconds"):
        Settings(home=tmp_path, instance_metrics_seconds=seconds)
    assert Settings(home=tmp_path, instance_metrics_seconds=0).instance_metrics_seconds == 0
