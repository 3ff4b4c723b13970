"""What instances send (phase reports, log lines) and how logs are read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from service.auth.tokens import job_token
from service.jobs.models import JobInstance, TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec


def _instance_headers(
    api: TestClient, settings: Settings, source_dir: Path, **spec: Any
) -> dict[str, str]:
    job = api.post("/v1/training-jobs", json=job_spec(source_dir, **spec)).json()
    return {"Authorization": f"Bearer {job_token(settings.signing_key(), job['id'])}"}


def _line(seq: int, second: int, message: str, stream: str = "stdout") -> dict[str, Any]:
    return {
        "seq": seq,
        "time": f"2026-01-01T00:00:{second:02d}Z",
        "stream": stream,
        "message": message,
    }


def test_retried_log_batch_is_stored_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _instance_headers(api, settings, source_dir)
    batch = {"lines": [_line(1, 0, "one"), _line(2, 1, "two")]}
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 2}
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 0}
    overlapping = {"lines": [_line(2, 1, "two"), _line(3, 2, "three")]}
    assert api.post(url, json=overlapping, headers=headers).json() == {"stored": 1}
    events = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [e["message"] for e in events] == ["one", "two", "three"]


def test_logs_merge_hosts_by_time_and_filter_by_host(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _instance_headers(api, settings, source_dir, instance_count=2)
    base = "/v1/training-jobs/job-1/instances"
    api.post(
        f"{base}/algo-2/logs",
        json={"lines": [_line(1, 1, "b1"), _line(2, 3, "b2")]},
        headers=headers,
    )
    api.post(
        f"{base}/algo-1/logs",
        json={"lines": [_line(1, 0, "a1"), _line(2, 2, "a2", "stderr")]},
        headers=headers,
    )

    merged = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [(e["host"], e["message"]) for e in merged] == [
        ("algo-1", "a1"),
        ("algo-2", "b1"),
        ("algo-1", "a2"),
        ("algo-2", "b2"),
    ]
    assert merged[2]["stream"] == "stderr"
    only_two = api.get("/v1/training-jobs/job-1/logs", params={"host": "algo-2"}).json()["events"]
    assert [e["message"] for e in only_two] == ["b1", "b2"]

    first = api.get("/v1/training-jobs/job-1/logs", params={"limit": 3}).json()
    rest = api.get("/v1/training-jobs/job-1/logs", params={"cursor": first["next_cursor"]}).json()
    assert [e["message"] for e in first["events"] + rest["events"]] == ["a1", "b1", "a2", "b2"]
    assert rest["next_cursor"] is None
    # A cursor from another listing is refused, not misread.
    api.post("/v1/training-jobs", json=job_spec(source_dir, name="job-2"))
    other = api.get("/v1/training-jobs", params={"limit": 1}).json()["next_cursor"]
    assert other is not None
    refused = api.get("/v1/training-jobs/job-1/logs", params={"cursor": other})
    assert refused.status_code == 422


def test_follow_streams_events_then_ends_with_the_job(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _instance_headers(api, settings, source_dir)
    api.post(
        "/v1/training-jobs/job-1/instances/algo-1/logs",
        json={"lines": [_line(1, 0, "first"), _line(2, 1, "second")]},
        headers=headers,
    )
    with session_scope(settings.database_url) as session:
        session.scalars(select(TrainingJob)).one().status = "Completed"

    with api.stream("GET", "/v1/training-jobs/job-1/logs", params={"follow": "true"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    events = [block for block in body.split("\n\n") if block.strip()]
    logs = [json.loads(e.split("data: ", 1)[1]) for e in events if "event: log" in e]
    assert [line["message"] for line in logs] == ["first", "second"]
    assert events[-1].startswith("event: end")
    assert '"Completed"' in events[-1]

    # Resuming after the first line sends only what came after it.
    first_id = next(e for e in events if "event: log" in e).split("\n")[0].removeprefix("id: ")
    assert first_id == "algo-1:1"
    resume = {"Last-Event-ID": first_id}
    with api.stream(
        "GET", "/v1/training-jobs/job-1/logs", params={"follow": "true"}, headers=resume
    ) as response:
        body = "".join(response.iter_text())
    assert "second" in body
    assert "first" not in body


def test_phase_reports_are_recorded_and_final_ones_stick(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = _instance_headers(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/status"
    for body in (
        {"phase": "Downloading", "time": "2026-01-01T00:00:00Z"},
        {"phase": "Training", "time": "2026-01-01T00:00:01Z"},
        {
            "phase": "Failed",
            "time": "2026-01-01T00:00:05Z",
            "exit_code": 3,
            "failure_reason": "x" * 2000,
        },
        {"phase": "Completed", "time": "2026-01-01T00:00:06Z", "exit_code": 0},
    ):
        assert api.post(url, json=body, headers=headers).status_code == 204
    with session_scope(settings.database_url) as session:
        row = session.scalars(select(JobInstance)).one()
        assert (row.phase, row.exit_code) == ("Failed", 3)
        assert row.failure_reason is not None
        assert len(row.failure_reason) == 1024
        assert row.training_started_at is not None
        assert row.training_started_at.second == 1
        assert row.training_ended_at is not None
        assert row.training_ended_at.second == 5


def test_bad_report_is_refused(api: TestClient, settings: Settings, source_dir: Path) -> None:
    headers = _instance_headers(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/status"
    assert (
        api.post(
            url, json={"phase": "Dancing", "time": "2026-01-01T00:00:00Z"}, headers=headers
        ).status_code
        == 422
    )
    lines = {"lines": [_line(0, 0, "seq must start at one")]}
    assert (
        api.post(
            "/v1/training-jobs/job-1/instances/algo-1/logs", json=lines, headers=headers
        ).status_code
        == 422
    )


def test_a_nul_an_instance_sends_is_stored_replaced(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    # PostgreSQL's text cannot hold a NUL; a script may still print one.
    headers = _instance_headers(api, settings, source_dir)
    base = "/v1/training-jobs/job-1/instances/algo-1"
    stored = api.post(f"{base}/logs", json={"lines": [_line(1, 0, "a\x00b")]}, headers=headers)
    assert stored.json() == {"stored": 1}
    report = {
        "phase": "Failed",
        "time": "2026-01-01T00:00:01Z",
        "message": "ended\x00",
        "exit_code": 1,
        "failure_reason": "AlgorithmError: \x00",
    }
    assert api.post(f"{base}/status", json=report, headers=headers).status_code == 204
    events = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [e["message"] for e in events] == ["a\ufffdb"]
    with session_scope(settings.database_url) as session:
        row = session.scalars(select(JobInstance)).one()
        assert (row.message, row.failure_reason) == ("ended\ufffd", "AlgorithmError: \ufffd")
