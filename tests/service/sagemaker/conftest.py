"""A Runyard API served over HTTP for SageMaker's clients, and its AWS credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.conftest import make_settings
from tests.service.sagemaker.live import client, serving


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    # The SageMaker SDK names ml.* instance types: this server runs a CPU one locally.
    return make_settings(
        tmp_path / "home", database_url, backends={"local": "local", "ml.m5.large": "local"}
    )


@pytest.fixture
def server(settings: Settings, admin_token: str) -> Iterator[str]:
    with serving(create_app(settings)) as url:
        yield url


@pytest.fixture
def api(settings: Settings, admin_token: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {admin_token}"
        yield test_client


def credentials(api: TestClient, token: str | None = None) -> dict[str, str]:
    """The AWS credentials of the admin token (or of ``token``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = api.post("/v1/me/aws-credentials", headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def sm(api: TestClient, server: str) -> Any:
    return client("sagemaker", server, credentials(api))
