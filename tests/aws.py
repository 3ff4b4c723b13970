"""moto's server as a real process: an AWS endpoint that boto3 reaches over HTTP.

Tests talk to it exactly as the backends talk to AWS (signed requests, XML answers,
botocore's own parsing); nothing inside boto3 or Runyard is patched. ``reset`` wipes
every service's state between tests, which is much cheaper than a new server.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.timeouts import REQUEST_TIMEOUT

REGION = "us-east-1"
START_TIMEOUT = 30.0
# Checked against moto's per-region offerings, as AWS refuses a type a region lacks.
SERVER_ENV = {"MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true"}


@dataclass(frozen=True)
class MotoServer:
    url: str
    log: Path

    def reset(self) -> None:
        httpx.post(f"{self.url}/moto-api/reset", timeout=REQUEST_TIMEOUT).raise_for_status()

    def client_env(self) -> dict[str, str]:
        """The variables through which boto3 itself (in this process or a runtime started
        as a subprocess) finds this endpoint, with dummy credentials."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, service: str, region: str = REGION) -> Any:
        """A boto3 client of this endpoint with dummy credentials. One attempt per call:
        an error a test provokes reaches it once, not after botocore's retries."""
        from botocore.config import Config  # here: a run without AWS tests does not load it

        config = Config(retries={"mode": "standard", "max_attempts": 1})
        return shared_session().client(
            service,
            endpoint_url=self.url,
            config=config,
            region_name=region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


@contextlib.contextmanager
def moto_server(log_dir: Path, **extra_env: str) -> Iterator[MotoServer]:
    port = _free_port()
    log = log_dir / "moto.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))},
        **SERVER_ENV,
        **extra_env,
    }
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", log)
    try:
        _wait_until_up(server, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_up(server: MotoServer, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited {process.returncode}: {server.log.read_text()}")
        try:
            server.reset()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto server not up in {START_TIMEOUT} s") from None
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def iam_user(server: MotoServer, name: str, statements: list[dict[str, Any]]) -> dict[str, str]:
    """An IAM user of ``server`` whose one inline policy holds ``statements``; its
    keys as boto3 takes them (``aws_access_key_id``, ``aws_secret_access_key``)."""
    iam = server.client("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(
        UserName=name,
        PolicyName="policy",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {
        "aws_access_key_id": key["AccessKeyId"],
        "aws_secret_access_key": key["SecretAccessKey"],
    }


def as_user(monkeypatch: pytest.MonkeyPatch, server: MotoServer, keys: dict[str, str]) -> None:
    """This process's AWS environment (boto3's, the service's) pointed at ``server`` with
    an IAM user's ``keys`` (``iam_user``'s)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["aws_secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


def enforce_iam(server: MotoServer) -> None:
    """From now on ``server`` refuses every call its IAM policies do not allow, as AWS
    does (its keys included: only IAM users' and assumed roles' keys work). moto ignores
    the session policies STS is given."""
    httpx.post(
        f"{server.url}/moto-api/reset-auth", content=b"0", timeout=REQUEST_TIMEOUT
    ).raise_for_status()


# Fixtures, registered as a plugin by tests/conftest.py.


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto server for the whole run; each test resets it before use."""
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3_client(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An empty S3, with this process's AWS environment (as boto3 reads it) pointing at
    it: what the runtime and the service use for s3:// URIs."""
    moto.reset()
    for name, value in moto.client_env().items():
        monkeypatch.setenv(name, value)
    return moto.client("s3")


@functools.cache
def shared_session() -> Any:
    """One boto3 session for the test process's clients, each given its own credentials: a
    session reads a service's model (SageMaker's is megabytes of JSON) once, and a new
    session for every client cost 0.2 s of CPU, a fifth of a SageMaker wire test's."""
    import boto3

    return boto3.session.Session()
