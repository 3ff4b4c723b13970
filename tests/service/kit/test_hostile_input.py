"""Input no database can take as it is (a NUL, an unpaired UTF-16 surrogate) gets a 422
that names where it is, never a 500, and the server goes on serving the same client."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.conftest import job_spec, submit_for_instances

MIDNIGHT = "2026-01-01T00:00:00+00:00"


def _cursor(time: str, row_id: object) -> str:
    raw = json.dumps([time, row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


QUERIES = [
    ("/v1/training-jobs?name_prefix=%00", ["query", "name_prefix"]),
    ("/v1/training-jobs?name_prefix=job%00", ["query", "name_prefix"]),
    ("/v1/training-jobs/job-1/logs?host=%00", ["query", "host"]),
    ("/v1/training-jobs/job-1/logs?host=algo-1%00&follow=true", ["query", "host"]),
    ("/v1/training-jobs/job-1/metrics?name=%00", ["query", "name"]),
    ("/v1/training-jobs?cursor=" + _cursor(MIDNIGHT, "a\x00"), ["query", "cursor"]),
    ("/v1/training-jobs?cursor=" + _cursor(MIDNIGHT, "a\ud800"), ["query", "cursor"]),
]


@pytest.mark.parametrize(("url", "loc"), QUERIES, ids=[url for url, _ in QUERIES])
def test_unstorable_query_parameters_are_refused_by_name(
    api: TestClient, source_dir: Path, url: str, loc: list[str]
) -> None:
    assert api.post("/v1/training-jobs", json=job_spec(source_dir)).status_code == 201

    response = api.get(url)

    assert response.status_code == 422, response.text
    assert [error["loc"] for error in response.json()["detail"]] == [loc]
    # The same client, and the pooled connection behind it, still work.
    listed = api.get("/v1/training-jobs", params={"name_prefix": "job"})
    assert listed.status_code == 200
    assert [job["name"] for job in listed.json()["items"]] == ["job-1"]


SURROGATES: list[tuple[str, dict[str, Any], list[str | int], str]] = [
    (
        "in a hyperparameter",
        {"hyperparameters": {"tag": "a\ud800"}},
        ["hyperparameters", "tag"],
        "",
    ),
    ("low, alone", {"hyperparameters": {"tag": "\udc00b"}}, ["hyperparameters", "tag"], ""),
    (
        "in a list",
        {"hyperparameters": {"tags": ["ok", "\ud800"]}},
        ["hyperparameters", "tags", 1],
        "",
    ),
    ("in an environment value", {"environment": {"FLAG": "\ud83d"}}, ["environment", "FLAG"], ""),
    (
        "in a hyperparameter key",
        {"hyperparameters": {"t\ud800g": 1}},
        ["hyperparameters"],
        "key 't\\ud800g'",
    ),
    (
        "in a key inside a hyperparameter",
        {"hyperparameters": {"layers": {"\udc00": 1}}},
        ["hyperparameters", "layers"],
        "key '\\udc00'",
    ),
    ("in an environment key", {"environment": {"\ud800": "x"}}, ["environment"], "key '\\ud800'"),
]


@pytest.mark.parametrize(
    ("case", "overrides", "loc", "named"), SURROGATES, ids=[case for case, *_ in SURROGATES]
)
def test_unpaired_surrogates_in_a_spec_are_refused_by_location(
    api: TestClient,
    source_dir: Path,
    case: str,
    overrides: dict[str, Any],
    loc: list[str | int],
    named: str,
) -> None:
    # json.dumps writes the surrogate as the \uXXXX escape a client would send.
    body = json.dumps(job_spec(source_dir, **overrides))
    assert "\\ud8" in body or "\\udc" in body

    response = api.post(
        "/v1/training-jobs", content=body, headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 422, (case, response.text)
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", *loc]
    assert "unpaired surrogate" in error["msg"]
    assert named in error["msg"]
    assert api.get("/v1/training-jobs").json()["items"] == []
    # Nothing was stored, and the next job goes in as usual.
    assert api.post("/v1/training-jobs", json=job_spec(source_dir)).status_code == 201


def test_a_model_uri_no_database_can_store_is_refused(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    instance = submit_for_instances(api, settings, source_dir)
    report = {"phase": "Completed", "time": "2026-01-01T00:00:00Z", "exit_code": 0}
    url = "/v1/training-jobs/job-1/instances/algo-1/status"

    refused = api.post(
        url, json={**report, "model_uri": "file:///out/model\x00.tar.gz"}, headers=instance
    )

    assert refused.status_code == 422, refused.text
    assert [error["loc"] for error in refused.json()["detail"]] == [["body", "model_uri"]]
    # The instance's next report is taken as usual.
    model = "file:///out/model.tar.gz"
    assert api.post(url, json={**report, "model_uri": model}, headers=instance).status_code == 204
