"""/metrics on the API: requests by route template, jobs by status and backend and the line
for capacity read from a real database, log ingest, the database pool."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.jobs.models import TrainingJob
from service.jobs.states import Stage, Status
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from tests.conftest import job_spec, log_line, submit_for_instances
from tests.service.observability.scrape import Samples, samples, value


def scrape(api: TestClient) -> Samples:
    """Every sample of /metrics, fetched without a token as Prometheus does."""
    response = api.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


def test_requests_are_counted_by_route_template_never_by_path(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    route = "/v1/training-jobs/{name}"
    before = scrape(api)
    assert api.post("/v1/training-jobs", json=job_spec(source_dir)).status_code == 201
    assert api.get("/v1/training-jobs/job-1").status_code == 200
    assert api.get("/v1/training-jobs/no-such-job").status_code == 404
    assert api.get("/no/such/path").status_code == 404
    after = scrape(api)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    total = "runyard_http_requests_total"
    assert grew(total, method="GET", route=route, status="200") == 1
    assert grew(total, method="GET", route=route, status="404") == 1
    assert grew(total, method="POST", route="/v1/training-jobs", status="201") == 1
    assert grew(total, method="GET", route="unmatched", status="404") == 1
    latency = "runyard_http_request_duration_seconds_count"
    assert grew(latency, method="GET", route=route) == 2
    # No raw path, and so no job's name, reaches a label.
    labels = {label for _, pairs in after for _, label in pairs}
    assert not {"/v1/training-jobs/job-1", "/no/such/path", "job-1"} & labels
    assert "job-1" not in api.get("/metrics").text


def test_jobs_are_counted_by_status_and_backend_and_the_line_by_backend(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    for name in ("waits", "ended", "waits-longer"):
        assert (
            api.post("/v1/training-jobs", json=job_spec(source_dir, name=name)).status_code == 201
        )
    with session_scope(settings.database_url) as session:

        def put(name: str, **values: object) -> None:
            session.execute(update(TrainingJob).where(TrainingJob.name == name).values(**values))

        put("waits", status=Status.IN_PROGRESS, stage=Stage.QUEUED)
        put("ended", status=Status.COMPLETED, stage=Stage.ENDED)
        put(
            "waits-longer",
            status=Status.IN_PROGRESS,
            stage=Stage.QUEUED,
            backend="kubernetes",
            created_at=utcnow() - timedelta(minutes=10),
        )
    samples = scrape(api)
    assert value(samples, "runyard_jobs", status="InProgress", backend="local") == 1
    assert value(samples, "runyard_jobs", status="Completed", backend="local") == 1
    assert value(samples, "runyard_jobs", status="InProgress", backend="kubernetes") == 1
    assert value(samples, "runyard_queue_depth", backend="local") == 1
    assert value(samples, "runyard_queue_depth", backend="kubernetes") == 1
    waited = value(samples, "runyard_queue_oldest_wait_seconds", backend="kubernetes")
    assert 600 <= waited < 900
    assert value(samples, "runyard_queue_oldest_wait_seconds", backend="local") < 300
    assert value(samples, "runyard_jobs_scrape_errors") == 0


def test_ingested_log_lines_and_batches_are_counted(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    headers = submit_for_instances(api, settings, source_dir)
    url = "/v1/training-jobs/job-1/instances/algo-1/logs"
    before = scrape(api)
    batch = {"lines": [log_line(1, 0, "one"), log_line(2, 1, "two"), log_line(3, 2, "three")]}
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 3}
    # A retried batch is counted as a batch, its lines were stored already.
    assert api.post(url, json=batch, headers=headers).json() == {"stored": 0}
    after = scrape(api)
    assert (
        value(after, "runyard_log_lines_ingested_total")
        - value(before, "runyard_log_lines_ingested_total")
        == 3
    )
    assert (
        value(after, "runyard_log_batches_ingested_total")
        - value(before, "runyard_log_batches_ingested_total")
        == 2
    )


def test_the_database_pool_in_use_and_its_capacity_are_exported(api: TestClient) -> None:
    samples = scrape(api)
    # Every engine this test process made adds its pool's capacity.
    assert value(samples, "runyard_db_pool_capacity") > 0
    assert value(samples, "runyard_db_pool_checked_out") >= 0
    assert ("runyard_db_pool_checked_out", frozenset()) in samples


def test_requests_carry_back_the_callers_request_id_or_a_new_one(api: TestClient) -> None:
    given = api.get("/healthz", headers={"X-Request-ID": "trace-4711"})
    assert given.headers["X-Request-ID"] == "trace-4711"
    made = api.get("/healthz", headers={"X-Request-ID": "not an id\\"})
    assert made.headers["X-Request-ID"] not in ("", "not an id\\")
    assert len(made.headers["X-Request-ID"]) == 32
    assert api.get("/healthz").headers["X-Request-ID"] != made.headers["X-Request-ID"]
