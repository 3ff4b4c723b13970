"""Metrics from log lines: definitions in the spec, points from shipped lines, the
metrics route, final metrics in the job, and the CLI's describe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from runyard import cli
from runyard.client import Client, RunyardError
from service.jobs.models import MetricPoint
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import InstanceHeaders, job_spec, log_line, submit_for_instances
from tests.runyard.in_process import InProcessClient

DEFINITIONS = [
    {"name": "train:loss", "regex": r"loss: ([-+0-9.eE]+)"},
    {"name": "valid:acc", "regex": r"acc=(\S+)"},
]
JOB = "/v1/training-jobs/job-1"


def _ship(
    api: TestClient, headers: InstanceHeaders, host: str, *lines: dict[str, Any]
) -> dict[str, Any]:
    response = api.post(
        f"{JOB}/instances/{host}/logs", json={"lines": list(lines)}, headers=headers.of(host)
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _points(api: TestClient, **params: Any) -> dict[str, list[tuple[str, str, float]]]:
    response = api.get(f"{JOB}/metrics", params=params)
    assert response.status_code == 200, response.text
    return {
        series["name"]: [(p["time"][17:19], p["host"], p["value"]) for p in series["points"]]
        for series in response.json()["metrics"]
    }


# -- definitions in the spec ----------------------------------------------------------

BAD_DEFINITIONS: list[tuple[str, Any, list[str | int]]] = [
    ("regex that does not compile", [{"name": "a", "regex": "loss: (["}], [0, "regex"]),
    ("regex without a group", [{"name": "a", "regex": "loss: [0-9]+"}], [0, "regex"]),
    ("regex with two groups", [{"name": "a", "regex": "(loss): ([0-9]+)"}], [0, "regex"]),
    ("empty regex", [{"name": "a", "regex": ""}], [0, "regex"]),
    ("regex too long", [{"name": "a", "regex": "(x)" + "y" * 498}], [0, "regex"]),
    ("empty name", [{"name": "", "regex": "(x)"}], [0, "name"]),
    ("name too long", [{"name": "n" * 256, "regex": "(x)"}], [0, "name"]),
    ("an instance metric's name", [{"name": "instance/CPU", "regex": "(x)"}], [0, "name"]),
    ("missing regex", [{"name": "a"}], [0, "regex"]),
    ("unknown key", [{"name": "a", "regex": "(x)", "unit": "s"}], [0, "unit"]),
    (
        "the third one is bad",
        [{"name": "a", "regex": "(x)"}, {"name": "b", "regex": "(y)"}, {"name": "c", "regex": "z"}],
        [2, "regex"],
    ),
    ("duplicate names", [{"name": "a", "regex": "(x)"}, {"name": "a", "regex": "(y)"}], []),
    ("more than 40", [{"name": f"m{i}", "regex": "(x)"} for i in range(41)], []),
    ("not a list", {"name": "a", "regex": "(x)"}, []),
]


@pytest.mark.parametrize(
    ("definitions", "where"),
    [case[1:] for case in BAD_DEFINITIONS],
    ids=[case[0] for case in BAD_DEFINITIONS],
)
def test_bad_metric_definitions_are_refused_naming_the_field(
    api: TestClient, source_dir: Path, definitions: Any, where: list[str | int]
) -> None:
    response = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, metric_definitions=definitions)
    )
    assert response.status_code == 422
    locs = [error["loc"] for error in response.json()["detail"]]
    assert ["body", "metric_definitions", *where] in locs
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_cli_error_names_the_definition_and_its_field(
    api: TestClient, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client_on(api, monkeypatch)
    definitions = [{"name": "a", "regex": "(x)"}, {"name": "b", "regex": "(y)"}]
    definitions.append({"name": "c", "regex": "no group"})
    with pytest.raises(RunyardError, match=r"metric_definitions\.2\.regex: .*one capture group"):
        client.create_job(job_spec(source_dir, metric_definitions=definitions))


def test_good_definitions_are_kept_in_the_spec(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    definitions = [*DEFINITIONS, {"name": "lr", "regex": r"(?:lr|rate)=(?P<value>[0-9.]+)"}]
    submit_for_instances(api, settings, source_dir, metric_definitions=definitions)
    job = api.get(JOB).json()
    assert job["spec"]["metric_definitions"] == definitions
    assert job["final_metrics"] == []


# -- points from shipped lines --------------------------------------------------------


def test_points_come_from_every_hosts_script_output_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(
        api, settings, source_dir, instance_count=2, metric_definitions=DEFINITIONS
    )
    first = [log_line(1, 0, "epoch 1 loss: 0.9 acc=0.5"), log_line(2, 2, "loss: 0.7", "stderr")]
    assert _ship(api, headers, "algo-1", *first) == {"stored": 2}
    _ship(
        api,
        headers,
        "algo-2",
        log_line(1, 1, "loss: 1.5e-1"),
        log_line(2, 3, "loss: 0.1", "runtime"),  # the runtime's own line, not the script's
        log_line(3, 4, "nothing to see"),
        log_line(4, 5, "loss: . acc=high"),  # matches, but no number
        log_line(5, 6, "acc=nan loss: inf"),  # not finite
        log_line(6, 7, "acc=0.75"),
    )
    # A retried batch (and one overlapping it) adds no point twice.
    assert _ship(api, headers, "algo-1", *first) == {"stored": 0}
    assert _ship(api, headers, "algo-1", first[1], log_line(3, 8, "loss: 0.5")) == {"stored": 1}

    assert _points(api) == {
        "train:loss": [
            ("00", "algo-1", 0.9),
            ("01", "algo-2", 0.15),
            ("02", "algo-1", 0.7),
            ("08", "algo-1", 0.5),
        ],
        "valid:acc": [("00", "algo-1", 0.5), ("07", "algo-2", 0.75)],
    }
    with session_scope(settings.database_url) as session:
        assert session.scalar(select(func.count()).select_from(MetricPoint)) == 6


def test_a_job_without_definitions_stores_no_points(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    _ship(api, headers, "algo-1", log_line(1, 0, "loss: 0.9"))
    assert api.get(f"{JOB}/metrics").json() == {"metrics": []}
    with session_scope(settings.database_url) as session:
        assert session.scalar(select(func.count()).select_from(MetricPoint)) == 0


# -- the metrics route ----------------------------------------------------------------


def test_metrics_route_filters_by_name_and_limits_to_the_latest(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir, metric_definitions=DEFINITIONS)
    _ship(api, headers, "algo-1", *(log_line(i, i, f"loss: {i}") for i in range(1, 6)))

    assert _points(api, name="train:loss", limit=2) == {
        "train:loss": [("04", "algo-1", 4.0), ("05", "algo-1", 5.0)]
    }
    # A defined metric with no points yet is listed, empty.
    assert _points(api, name="valid:acc") == {"valid:acc": []}
    unknown = api.get(f"{JOB}/metrics", params={"name": "bogus"})
    assert unknown.status_code == 404
    assert "bogus" in unknown.json()["detail"]
    assert api.get("/v1/training-jobs/nope/metrics").status_code == 404
    assert api.get(f"{JOB}/metrics", params={"limit": 0}).status_code == 422
    # Read by users only: an instance's job token may not.
    assert api.get(f"{JOB}/metrics", headers=headers).status_code == 403
    assert api.get(f"{JOB}/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_final_metrics_hold_the_latest_value_of_each_metric(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(
        api, settings, source_dir, instance_count=2, metric_definitions=DEFINITIONS
    )
    _ship(api, headers, "algo-1", log_line(1, 0, "loss: 0.9"), log_line(2, 5, "loss: 0.4 acc=0.8"))
    # algo-2's batch arrives later but its values are older: they are not the final ones.
    _ship(api, headers, "algo-2", log_line(1, 3, "loss: 0.6"), log_line(2, 9, "acc=0.85"))

    final = api.get(JOB).json()["final_metrics"]
    assert [(m["name"], m["value"], m["time"][17:19]) for m in final] == [
        ("train:loss", 0.4, "05"),
        ("valid:acc", 0.85, "09"),
    ]


# -- the CLI and the client -------------------------------------------------------------


def _client_on(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setattr(cli, "Client", lambda: InProcessClient(api))
    return InProcessClient(api)


def test_describe_shows_the_last_value_of_each_metric(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = submit_for_instances(api, settings, source_dir, metric_definitions=DEFINITIONS)
    client = _client_on(api, monkeypatch)
    result = CliRunner().invoke(cli.main, ["describe", "job-1"])
    assert result.exit_code == 0, result.output
    assert "Metrics:" not in result.output

    _ship(api, headers, "algo-1", log_line(1, 0, "loss: 0.9 acc=0.5"), log_line(2, 1, "loss: 0.25"))
    result = CliRunner().invoke(cli.main, ["describe", "job-1"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    metrics = lines[lines.index("Metrics:") + 1 :]
    assert metrics == [
        "  train:loss  0.25          at 2026-01-01 00:00:01",
        "  valid:acc   0.5           at 2026-01-01 00:00:00",
    ]

    series = client.metrics("job-1", metric="train:loss")
    assert [(s["name"], [p["value"] for p in s["points"]]) for s in series] == [
        ("train:loss", [0.9, 0.25])
    ]
    assert [s["name"] for s in client.metrics("job-1")] == ["train:loss", "valid:acc"]


def test_a_progress_metric_gives_progress_and_the_time_left(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = submit_for_instances(
        api,
        settings,
        source_dir,
        metric_definitions=[{"name": "epoch", "regex": r"^epoch (\d+)"}],
        progress_metric={"name": "epoch", "total": 10},
        instance_count=2,
    )
    assert api.get(JOB).json()["progress"] is None
    now = datetime.now(UTC)

    def at(seq: int, ago: float, message: str) -> dict[str, Any]:
        when = (now - timedelta(seconds=ago)).isoformat()
        return {"seq": seq, "time": when, "stream": "stdout", "message": message}

    # Two epochs in 20 s: the six left take a minute more.
    _ship(api, headers, "algo-1", at(1, 20, "epoch 2"), at(2, 0, "epoch 4"))
    job = api.get(JOB).json()
    assert job["progress"] == pytest.approx(0.4)
    assert 55 <= job["estimated_remaining_seconds"] <= 60
    # A host that reports an older epoch late does not move progress back.
    _ship(api, headers, "algo-2", at(1, 10, "epoch 3"))
    assert api.get(JOB).json()["progress"] == pytest.approx(0.4)

    _client_on(api, monkeypatch)
    result = CliRunner().invoke(cli.main, ["describe", "job-1"])
    assert result.exit_code == 0, result.output
    assert "Progress:         40.0%, about " in result.output
