"""/healthz says the process answers; /readyz whether the database and the broker do, and
which one does not."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import PUBLIC_PATHS, create_app
from service.settings import Settings
from tests.conftest import make_settings


def closed_port() -> int:
    """A port nothing listens on (bound a moment, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_probes_need_no_token() -> None:
    assert {"/healthz", "/readyz", "/metrics"} <= PUBLIC_PATHS


def test_ready_when_the_database_and_the_broker_answer(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "ok",
        "checks": {"database": {"ok": True}, "broker": {"ok": True}},
    }


@pytest.mark.postgres
def test_ready_on_postgres_and_redis(tmp_path: Path, postgres_url: str) -> None:
    settings = make_settings(tmp_path, postgres_url, broker_url="redis://127.0.0.1:6379/0")
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200


def test_a_broker_that_does_not_answer_is_named(tmp_path: Path, database_url: str) -> None:
    port = closed_port()
    settings = make_settings(tmp_path, database_url, broker_url=f"redis://127.0.0.1:{port}/0")
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        response = client.get("/readyz")
        took = time.monotonic() - started
        alive = client.get("/healthz")
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["broker"]["ok"] is False
    # The error's kind, never where the broker is.
    assert str(port) not in response.text
    assert took < 10
    assert alive.status_code == 200


def test_a_database_that_does_not_answer_is_named(tmp_path: Path) -> None:
    port = closed_port()
    settings = make_settings(tmp_path, f"postgresql://runyard@127.0.0.1:{port}/runyard")
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        alive = client.get("/healthz")
    assert response.status_code == 503, response.text
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is False
    assert checks["database"]["error"] == "OperationalError"
    assert checks["broker"] == {"ok": True}
    assert str(port) not in response.text
    assert alive.status_code == 200
    assert alive.json() == {"status": "ok"}


def test_a_database_that_stopped_is_told_from_a_broker_that_stopped(tmp_path: Path) -> None:
    """Both gone: each is named, so an operator knows there are two things to fix."""
    database, broker = closed_port(), closed_port()
    settings = make_settings(
        tmp_path,
        f"postgresql://runyard@127.0.0.1:{database}/runyard",
        broker_url=f"redis://127.0.0.1:{broker}/0",
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is False
    assert checks["broker"]["ok"] is False


def test_metrics_still_answer_when_the_database_does_not(tmp_path: Path) -> None:
    """The request counts are what an operator needs most during an outage: the job
    gauges are left out, and a gauge says why."""
    settings = make_settings(tmp_path, f"postgresql://runyard@127.0.0.1:{closed_port()}/x")
    with TestClient(create_app(settings)) as client:
        client.get("/healthz")
        response = client.get("/metrics")
    assert response.status_code == 200
    assert "runyard_jobs_scrape_errors 1.0" in response.text
    assert "runyard_http_requests_total{" in response.text
    assert "runyard_jobs{" not in response.text
