"""A job that names a CodeArtifact repository (CA_REPOSITORY_ARN) installs its requirements
from it, as SageMaker's toolkit does: boto3 asks CodeArtifact's API for a token and the
repository's endpoint, and pip reads the index with the token.

There is no CodeArtifact here, so a small HTTP server speaks the two operations of its API
(JSON over REST, as botocore's model says) and serves the repository's simple index, which
answers only the right token."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from runtime.instance import layers
from runtime.instance.install import InstallError
from tests.wheels import make_wheel

TOKEN = "ca-token-1234"
ARN = "arn:aws:codeartifact:us-east-1:111122223333:repository/team/pypi-store"


class _CodeArtifact(http.server.BaseHTTPRequestHandler):
    wheels: ClassVar[Path]
    url: ClassVar[str]
    asked: ClassVar[list[dict[str, list[str]]]] = []

    def do_POST(self) -> None:
        where = urlsplit(self.path)
        if where.path == "/v1/authorization-token":
            self.asked.append(parse_qs(where.query))
            self._json({"authorizationToken": TOKEN, "expiration": 1900000000})
        else:
            self.send_error(404)

    def do_GET(self) -> None:
        where = urlsplit(self.path)
        if where.path == "/v1/repository/endpoint":
            self._json({"repositoryEndpoint": f"{self.url}/pypi/pypi-store/"})
            return
        if not where.path.startswith("/pypi/pypi-store/simple/"):
            self.send_error(404)
            return
        wanted = "Basic " + base64.b64encode(f"aws:{TOKEN}".encode()).decode()
        if self.headers.get("Authorization") != wanted:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="codeartifact"')
            self.end_headers()
            return
        # /simple/<project>/ lists its wheels; /simple/<project>/<wheel> is one of them.
        project, _, wheel = where.path.removeprefix("/pypi/pypi-store/simple/").partition("/")
        if wheel.endswith(".whl"):
            self._send((self.wheels / Path(wheel).name).read_bytes(), "application/octet-stream")
            return
        stem = project.replace("-", "_")
        links = "".join(
            f'<a href="{w.name}">{w.name}</a>'
            for w in self.wheels.glob("*.whl")
            if w.name.split("-")[0] == stem
        )
        self._send(f"<html><body>{links}</body></html>".encode(), "text/html")

    def _json(self, body: object) -> None:
        self._send(json.dumps(body).encode(), "application/json")

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def codeartifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    wheels = tmp_path_factory.mktemp("store") / "wheels"
    make_wheel(wheels, "runyard_probe", "1.0", "VALUE = 'from the repository'\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CodeArtifact)
    _CodeArtifact.wheels = wheels
    _CodeArtifact.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield _CodeArtifact.url
    finally:
        server.shutdown()
        server.server_close()


def _job_env(url: str, **more: str) -> dict[str, str]:
    return {
        "CA_REPOSITORY_ARN": ARN,
        "AWS_ENDPOINT_URL_CODEARTIFACT": url,
        "AWS_ACCESS_KEY_ID": "AKIAJOB",
        "AWS_SECRET_ACCESS_KEY": "job-secret",
        "PATH": "/usr/bin:/bin",
        "PIP_NO_CACHE_DIR": "1",
        **more,
    }


def test_requirements_come_from_the_repository_the_job_names(
    tmp_path: Path, codeartifact: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "requirements.txt").write_text("runyard-probe==1.0\n")
    said: list[str] = []
    job = layers.job_layer(
        tmp_path / "job-env",
        layers.image(sys.executable),
        code,
        _job_env(codeartifact),
        said.append,
    )
    assert said[0] == f"Installing from the CodeArtifact repository {ARN}"
    assert _CodeArtifact.asked[-1] == {"domain": ["team"], "domain-owner": ["111122223333"]}
    # pip shows the index without the token.
    assert any("aws:****@127.0.0.1" in line for line in said), said
    assert not any(TOKEN in line for line in said)
    probe = "import runyard_probe; print(runyard_probe.VALUE)"
    shown = subprocess.run([job.python, "-c", probe], capture_output=True, text=True, cwd="/")
    assert shown.stdout.strip() == "from the repository"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"CA_REPOSITORY_ARN": "arn:aws:s3:::a-bucket"}, "is not a repository's ARN"),
        ({"AWS_ENDPOINT_URL_CODEARTIFACT": "http://127.0.0.1:9"}, "CodeArtifact refused"),
    ],
)
def test_a_repository_that_cannot_be_had_fails_the_install_saying_why(
    tmp_path: Path, codeartifact: str, env: dict[str, str], words: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "requirements.txt").write_text("runyard-probe==1.0\n")
    with pytest.raises(InstallError, match=words):
        layers.job_layer(
            tmp_path / "job-env",
            layers.image(sys.executable),
            code,
            _job_env(codeartifact, **env),
            lambda _: None,
        )
