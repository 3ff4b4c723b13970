"""A request to the API without any credential is refused (401) before its body is read,
malformed or not; one that carries a credential is judged by the routes as before; the
open paths stay open, and SageMaker's signed calls keep AWS's own refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from service.app import create_app
from service.auth import sessions
from service.settings import Settings
from tests.service.kit.test_body_limit import CountedBody, MiB
from tests.service.sagemaker.live import serving
from tests.timeouts import REQUEST_TIMEOUT

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def server(settings: Settings, admin_token: str) -> Iterator[str]:
    with serving(create_app(settings)) as url:
        yield url


def _asgi_call(
    settings: Settings, path: str, headers: list[tuple[bytes, bytes]], root_path: str = ""
) -> tuple[list[Message], int]:
    """The messages the app answers with, and how many times it asked for the body."""
    app = create_app(settings)
    asked = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": b"{not json", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": root_path + path,
        "raw_path": (root_path + path).encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": [(b"host", b"runyard"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("runyard", 80),
    }
    asyncio.run(app(scope, receive, send))
    return sent, asked


@pytest.mark.parametrize("root_path", ["", "/runyard"], ids=["at-root", "behind-a-prefix"])
def test_an_anonymous_body_is_never_read(settings: Settings, root_path: str) -> None:
    body_headers = [(b"content-type", b"application/json"), (b"content-length", b"9")]
    sent, asked = _asgi_call(settings, "/v1/training-jobs", body_headers, root_path)
    start = sent[0]
    assert start["status"] == 401
    headers = dict(start["headers"])
    assert headers[b"www-authenticate"] == b"Bearer"
    assert headers[b"connection"] == b"close"  # the body is left where it is
    assert b"missing bearer token" in sent[1]["body"]
    assert asked == 0
    # With a credential (here one nobody holds), the body is read and parsed first, as
    # FastAPI does; the credential is refused all the same.
    with_token = [*body_headers, (b"authorization", b"Bearer ry_not-a-token")]
    sent, asked = _asgi_call(settings, "/v1/training-jobs", with_token, root_path)
    assert (sent[0]["status"], asked) == (401, 1)


def test_an_anonymous_upload_is_refused_before_it_arrives(server: str) -> None:
    body = CountedBody(64 * MiB)
    response = httpx.post(
        f"{server}/v1/training-jobs", content=iter(body), headers=JSON, timeout=REQUEST_TIMEOUT
    )
    assert response.status_code == 401, response.text
    assert response.headers["connection"] == "close"
    assert body.sent < body.size


@pytest.mark.parametrize("body", ["{not json", '{"instance_type": 7}', ""])
def test_a_malformed_body_without_credentials_gets_401(server: str, body: str) -> None:
    for path in ("/v1/training-jobs", "/v1/tokens", "/v1/no-such-route"):
        response = httpx.post(server + path, content=body, headers=JSON, timeout=REQUEST_TIMEOUT)
        assert response.status_code == 401, (path, response.text)
        assert response.json() == {"detail": "missing bearer token (Authorization: Bearer <token>)"}


def test_a_credential_that_does_not_hold_gets_the_same_401(server: str, admin_token: str) -> None:
    malformed = "{not json"
    # A wrong token (any case of its scheme), a session cookie that has ended: read after
    # the body, as before; a scheme other than Bearer is no credential here.
    for headers in (
        {"Authorization": "Bearer ry_not-a-token"},
        {"Authorization": "bearer ry_not-a-token"},
        {"Cookie": f"{sessions.COOKIE}=ended"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ):
        response = httpx.post(
            f"{server}/v1/training-jobs",
            content=malformed,
            headers={**JSON, **headers},
            timeout=REQUEST_TIMEOUT,
        )
        assert response.status_code == 401, (headers, response.text)
    # A token that holds: the body is judged.
    response = httpx.post(
        f"{server}/v1/training-jobs",
        content=malformed,
        headers={**JSON, "Authorization": f"Bearer {admin_token}"},
        timeout=REQUEST_TIMEOUT,
    )
    assert response.status_code == 422, response.text


def test_the_open_paths_stay_open(api: TestClient) -> None:
    api.headers.pop("Authorization")
    # Signing in takes its token in the body: a malformed one is judged as such.
    assert api.post("/v1/session", content="{not json", headers=JSON).status_code == 422
    for path in ("/healthz", "/metrics", "/", "/sign-in", "/openapi.json"):
        assert api.get(path).status_code == 200, path


def test_sagemakers_calls_keep_aws_refusals(server: str) -> None:
    headers = {
        "X-Amz-Target": "SageMaker.DescribeTrainingJob",
        "Content-Type": "application/x-amz-json-1.1",
    }
    response = httpx.post(
        server + "/", content=b"{not json", headers=headers, timeout=REQUEST_TIMEOUT
    )
    assert response.status_code == 403
    assert response.json()["__type"].endswith("MissingAuthenticationTokenException")
