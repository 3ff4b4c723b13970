"""Bearer tokens on every route; job tokens only for their own job's reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from runyard.server import prepare
from service.app import PUBLIC_PATHS, ROUTERS, create_app
from service.auth.models import ApiToken
from service.auth.tokens import instance_token
from service.kit.db import session_scope
from service.settings import Settings
from tests.conftest import job_spec, make_settings


def _protected_routes() -> list[tuple[str, str]]:
    routes = []
    for router in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            path = route.path.replace("{name}", "job-1").replace("{host}", "algo-1")
            path = path.replace("{project}", "default")
            routes.extend((method, path) for method in sorted(route.methods))
    return routes


def test_routes_outside_the_protected_routers_are_only_the_public_ones(settings: Settings) -> None:
    # A route added to the app directly (not through a router of ROUTERS) must be one of
    # the few meant to be open; anything else belongs in a protected router.
    app_paths = {
        path for route in create_app(settings).routes if (path := getattr(route, "path", None))
    }
    assert app_paths <= PUBLIC_PATHS


def test_every_route_but_health_and_docs_is_protected() -> None:
    routes = _protected_routes()
    # Jobs (create, list, describe, stop, logs, metrics), instance reports (status, logs,
    # instance metrics, interruption) and an instance's AWS credentials, sources, tokens
    # (mint, list, revoke), projects (create, list) and their granted places (list, grant,
    # revoke), me, capacity, a job's place in line, model and output data downloads, the
    # caller's AWS credentials, a job's log download and its spec to clone, the instance
    # types the server offers, deleting an ended job, and tuning jobs (create, list,
    # describe, stop).
    assert len(routes) == 34, routes


@pytest.mark.parametrize(
    "credentials", [None, "Bearer ry_not-a-real-token", "Basic dXNlcjpwYXNz", "Bearer "]
)
def test_no_token_or_a_wrong_token_gets_401(api: TestClient, credentials: str | None) -> None:
    for method, path in _protected_routes():
        headers = {"Authorization": credentials} if credentials else {}
        api.headers.pop("Authorization", None)
        response = api.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers.get("www-authenticate") == "Bearer"


def test_health_and_docs_are_open(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/docs").status_code == 200


def test_instance_token_cannot_use_user_routes(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
    token = instance_token(settings.signing_key(), job["id"], "algo-1")
    headers = {"Authorization": f"Bearer {token}"}
    assert api.get("/v1/training-jobs", headers=headers).status_code == 403
    assert api.get("/v1/training-jobs/job-1", headers=headers).status_code == 403
    assert api.post("/v1/training-jobs/job-1/stop", headers=headers).status_code == 403


def test_instance_token_reports_only_for_its_own_instance(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    first = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, name="first", instance_count=2)
    ).json()
    api.post("/v1/training-jobs", json=job_spec(source_dir, name="second"))
    token = instance_token(settings.signing_key(), first["id"], "algo-1")
    headers = {"Authorization": f"Bearer {token}"}
    line = {
        "lines": [{"seq": 1, "time": "2026-01-01T00:00:00Z", "stream": "stdout", "message": "hi"}]
    }
    assert (
        api.post(
            "/v1/training-jobs/first/instances/algo-1/logs", json=line, headers=headers
        ).status_code
        == 200
    )
    assert (
        api.post(
            "/v1/training-jobs/second/instances/algo-1/logs", json=line, headers=headers
        ).status_code
        == 403
    )
    # Another instance of the same job: algo-1 may not speak for it.
    status = {"phase": "Training", "time": "2026-01-01T00:00:00Z"}
    for path, body in (("logs", line), ("status", status)):
        refused = api.post(
            f"/v1/training-jobs/first/instances/algo-2/{path}", json=body, headers=headers
        )
        assert refused.status_code == 403, refused.text
    # A host the job does not have, with a token made for it.
    stray = instance_token(settings.signing_key(), first["id"], "algo-3")
    assert (
        api.post(
            "/v1/training-jobs/first/instances/algo-3/logs",
            json=line,
            headers={"Authorization": f"Bearer {stray}"},
        ).status_code
        == 404
    )
    # The admin token is not an instance's credential either.
    assert api.post("/v1/training-jobs/first/instances/algo-1/logs", json=line).status_code == 403


def test_forged_instance_token_is_refused(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    job = api.post("/v1/training-jobs", json=job_spec(source_dir)).json()
    forged = instance_token(b"some other key", job["id"], "algo-1")
    headers = {"Authorization": f"Bearer {forged}"}
    line = {
        "lines": [{"seq": 1, "time": "2026-01-01T00:00:00Z", "stream": "stdout", "message": "hi"}]
    }
    assert (
        api.post(
            "/v1/training-jobs/job-1/instances/algo-1/logs", json=line, headers=headers
        ).status_code
        == 401
    )


def test_minted_token_works_and_is_shown_once(api: TestClient) -> None:
    created = api.post("/v1/tokens", json={"name": "ci"})
    assert created.status_code == 201
    token = created.json()["token"]
    api.headers["Authorization"] = f"Bearer {token}"
    assert api.get("/v1/training-jobs").status_code == 200


def test_a_configured_admin_token_is_the_one_every_replica_uses(
    tmp_path: Path, database_url: str
) -> None:
    token = "ry_" + "k" * 40
    first = make_settings(tmp_path / "replica-1", database_url, admin_token=token)
    second = make_settings(tmp_path / "replica-2", database_url, admin_token=token)
    assert prepare(first) == token
    assert prepare(second) == token  # a second API pod stores nothing new
    assert (tmp_path / "replica-2" / "token").read_text().strip() == token
    with session_scope(database_url) as session:
        assert session.scalars(select(ApiToken.name)).all() == ["admin"]
        assert session.scalars(select(ApiToken.server_admin)).all() == [True]
    with TestClient(create_app(second)) as client:
        response = client.get("/v1/training-jobs", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200


@pytest.mark.parametrize("token", ["secret", "ry_short", "ry_" + "é" * 40])
def test_an_admin_token_that_is_not_a_runyard_token_is_refused(tmp_path: Path, token: str) -> None:
    with pytest.raises(ValidationError, match="admin_token"):
        Settings(home=tmp_path, admin_token=token)  # type: ignore[arg-type]
