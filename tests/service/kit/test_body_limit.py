"""Request bodies are bounded while they arrive, before anyone is authenticated: a body
over the limit is refused without being read whole (a request without credentials at all
is refused before its body is read: tests/service/auth/test_anonymous.py); the source upload
has its own, larger limit; everything else works as before."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from contract.archive import make_tarball
from contract.limits import MAX_LOG_BATCH_BODY
from service.app import create_app
from service.settings import Settings
from tests.conftest import job_spec
from tests.service.sagemaker.live import serving

MiB = 1024 * 1024
# A credential whose holder is read only after the body: none holds it.
UNCHECKED = "Bearer ry_not-a-token"
# Mounted behind a proxy under this prefix, as uvicorn --root-path serves it.
PREFIX = "/runyard"


class CountedBody:
    """A streamed body of ``size`` bytes, counting what was taken from it."""

    def __init__(self, size: int, chunk: int = 64 * 1024) -> None:
        self.size = size
        self.chunk = chunk
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        piece = b" " * self.chunk
        while self.sent < self.size:
            self.sent += len(piece)
            yield piece


@pytest.fixture
def server(settings: Settings) -> Iterator[str]:
    with serving(create_app(settings)) as url:
        yield url


def test_a_body_over_the_limit_is_refused_as_it_arrives_before_its_token_is_read(
    server: str, settings: Settings
) -> None:
    body = CountedBody(64 * MiB)
    # Streamed (chunked): no length says beforehand how large it is.
    response = httpx.post(
        f"{server}/v1/training-jobs",
        content=iter(body),
        headers={"Content-Type": "application/json", "Authorization": UNCHECKED},
        timeout=30,
    )
    assert response.status_code == 413, response.text
    assert str(settings.max_request_bytes) in response.json()["detail"]
    # Refused once the limit passed, not after the body was read: what the client still
    # had to send was left unsent when the server closed the connection.
    assert response.headers["connection"] == "close"
    assert body.sent < body.size


def test_a_declared_length_over_the_limit_is_refused_before_the_body(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            b"POST /v1/training-jobs HTTP/1.1\r\nHost: runyard\r\n"
            b"Authorization: " + UNCHECKED.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n"
        )
        # No byte of the body sent: the answer comes anyway.
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413 "), answer


def test_an_early_answer_closes_the_connection_instead_of_reading_the_upload(
    server: str,
) -> None:
    body = CountedBody(64 * MiB)
    response = httpx.post(
        f"{server}/v1/sources", content=iter(body), headers={"Authorization": UNCHECKED}, timeout=30
    )
    assert response.status_code == 401
    assert body.sent < body.size


def test_the_limits_apply_to_each_route(settings: Settings, admin_token: str) -> None:
    small = settings.model_copy(update={"max_request_bytes": MAX_LOG_BATCH_BODY})
    headers = {"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"}
    with TestClient(create_app(small)) as client:
        over = b" " * (MAX_LOG_BATCH_BODY + 1)
        for path in ("/v1/training-jobs", "/v1/session", "/", "/v1/no-such-route"):
            assert client.post(path, content=over, headers=headers).status_code == 413, path
        # The upload's own limit, larger: the JSON limit does not apply to it.
        assert client.post("/v1/sources", content=over, headers=headers).status_code == 422


def test_requests_and_uploads_under_their_limits_work(
    settings: Settings, admin_token: str, source_dir: Path, tmp_path: Path
) -> None:
    # Code larger than any JSON body may be (random bytes: gzip does not shrink them).
    (source_dir / "weights.bin").write_bytes(os.urandom(MAX_LOG_BATCH_BODY + MiB))
    bundle = make_tarball(source_dir, tmp_path / "code.tar.gz").read_bytes()
    assert len(bundle) > MAX_LOG_BATCH_BODY
    small = settings.model_copy(update={"max_request_bytes": MAX_LOG_BATCH_BODY})
    app = create_app(small)
    for client, base in ((TestClient(app), ""), (TestClient(_behind_prefix(app)), PREFIX)):
        with client:
            client.headers["Authorization"] = f"Bearer {admin_token}"
            uploaded = client.post(
                f"{base}/v1/sources", content=bundle, headers={"Content-Type": "application/gzip"}
            )
            assert uploaded.status_code == 201, uploaded.text
            spec = job_spec(source_dir, source_uri=uploaded.json()["source_uri"])
            created = client.post(f"{base}/v1/training-jobs", json=spec, params={"dry_run": True})
            assert created.status_code == 200, created.text


def test_the_limit_is_never_below_an_instances_log_batch(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).max_request_bytes >= MAX_LOG_BATCH_BODY
    with pytest.raises(ValidationError, match="max_request_bytes"):
        Settings(home=tmp_path, max_request_bytes=MAX_LOG_BATCH_BODY - 1)


def _behind_prefix(app: ASGIApp) -> ASGIApp:
    """What uvicorn --root-path hands the app: the full path, and the prefix."""

    async def prefixed(scope: Scope, receive: Receive, send: Send) -> None:
        await app({**scope, "root_path": PREFIX}, receive, send)

    return prefixed
