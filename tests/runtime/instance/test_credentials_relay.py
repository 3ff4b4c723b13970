"""The runtime's relay of the job's AWS credentials, read by botocore's own container
credentials provider (what boto3 in a user's script uses)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.credentials import ContainerProvider
from botocore.exceptions import CredentialRetrievalError

from contract import variables
from contract.instance_config import load
from runtime.instance import credentials_relay
from runtime.instance.credentials_relay import CredentialsRelay
from runtime.reporting.reporter import ServiceClient
from tests.instances import launch_request, write_instances


def _credentials(key: str, lasting: timedelta) -> bytes:
    expiration = (datetime.now(UTC) + lasting).isoformat().replace("+00:00", "Z")
    return json.dumps(
        {"AccessKeyId": key, "SecretAccessKey": "s", "Token": "t", "Expiration": expiration}
    ).encode()


class Counting:
    def __init__(self, lasting: timedelta) -> None:
        self.calls = 0
        self.lasting = lasting

    def __call__(self) -> bytes:
        self.calls += 1
        return _credentials(f"ASIAJOB{self.calls}", self.lasting)


@pytest.fixture
def relay() -> Iterator[tuple[CredentialsRelay, Counting]]:
    fetch = Counting(timedelta(hours=1))
    running = CredentialsRelay(fetch).start()
    yield running, fetch
    running.stop()


def _provider(url: str, token: str) -> ContainerProvider:
    return ContainerProvider(
        environ={variables.CONTAINER_CREDENTIALS_URI: url, variables.CONTAINER_AUTHORIZATION: token}
    )


def test_botocore_takes_the_jobs_credentials_from_the_relay(
    relay: tuple[CredentialsRelay, Counting],
) -> None:
    running, fetch = relay
    assert running.url.startswith("http://127.0.0.1:")
    frozen = _provider(running.url, running.token).load().get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key, frozen.token) == ("ASIAJOB1", "s", "t")
    # Fresh for another hour: a second SDK (another rank) is given the same.
    _provider(running.url, running.token).load().get_frozen_credentials()
    assert fetch.calls == 1


def test_credentials_near_their_end_are_fetched_again() -> None:
    fetch = Counting(timedelta(minutes=10))
    running = CredentialsRelay(fetch).start()
    try:
        running.answer()
        running.answer()
    finally:
        running.stop()
    assert fetch.calls == 2


def test_the_relay_opens_only_to_its_token(relay: tuple[CredentialsRelay, Counting]) -> None:
    running, fetch = relay
    with pytest.raises(CredentialRetrievalError, match="401"):
        _provider(running.url, "a guess").load()
    request = urllib.request.Request(running.url)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401
    refused.value.close()
    assert fetch.calls == 0


def test_a_refusal_by_the_service_reaches_the_script_with_its_reason() -> None:
    def refusing() -> bytes:
        raise credentials_relay.CredentialsError("the service answered 409: no credentials")

    running = CredentialsRelay(refusing).start()
    try:
        with pytest.raises(CredentialRetrievalError, match="409: no credentials"):
            _provider(running.url, running.token).load()
    finally:
        running.stop()


def test_an_unreadable_answer_is_not_handed_on() -> None:
    running = CredentialsRelay(lambda: b'{"AccessKeyId": "x"}').start()
    try:
        with pytest.raises(credentials_relay.CredentialsError, match="unreadable"):
            running.answer()
    finally:
        running.stop()


class _Service(BaseHTTPRequestHandler):
    """The service's credentials route, as the runtime reaches it."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = _credentials("ASIASERVICE", timedelta(hours=1))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Service.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_runtime_names_the_relay_and_drops_every_other_credential(
    tmp_path: Path, service: str
) -> None:
    request = dataclasses.replace(launch_request(tmp_path / "src"), aws_credentials=True)
    config = load(write_instances(tmp_path / "instances", request)["algo-1"])
    client = ServiceClient(service, "instance-token", "job-1", "algo-1")
    environ = {"AWS_ACCESS_KEY_ID": "server", "AWS_SECRET_ACCESS_KEY": "server", "PATH": "/bin"}
    relay = credentials_relay.serve(config, client, environ)
    assert relay is not None
    try:
        assert environ == {
            "PATH": "/bin",
            variables.CONTAINER_CREDENTIALS_URI: relay.url,
            variables.CONTAINER_AUTHORIZATION: relay.token,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_CONFIG_FILE": os.devnull,
        }
        frozen = _provider(relay.url, relay.token).load().get_frozen_credentials()
    finally:
        relay.stop()
    assert frozen.access_key == "ASIASERVICE"
    assert _Service.seen == [
        ("/v1/training-jobs/job-1/instances/algo-1/credentials", "Bearer instance-token")
    ]


def test_without_credentials_from_the_service_nothing_is_relayed(tmp_path: Path) -> None:
    config = load(write_instances(tmp_path / "instances", launch_request(tmp_path))["algo-1"])
    client = ServiceClient("http://127.0.0.1:1", "instance-token", "job-1", "algo-1")
    environ = {"AWS_ACCESS_KEY_ID": "machine"}
    assert credentials_relay.serve(config, client, environ) is None
    assert environ == {"AWS_ACCESS_KEY_ID": "machine"}


@pytest.fixture
def network_namespace() -> Iterator[str]:
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root and iproute2 for a network namespace")
    name = f"ry-relay-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_with_namespaces_the_relay_is_at_one_address_in_both_networks(
    network_namespace: str,
) -> None:
    """The job's processes (in the instance's network) and the runtime (in the machine's)
    reach it at the one URL they all inherit."""
    fetch = Counting(timedelta(hours=1))
    running = CredentialsRelay(fetch, f"/run/netns/{network_namespace}").start()
    probe = (
        "import sys, urllib.request\n"
        "request = urllib.request.Request(sys.argv[1], headers={'Authorization': sys.argv[2]})\n"
        "print(urllib.request.urlopen(request, timeout=5).read().decode())\n"
    )
    try:
        inside = subprocess.run(
            ["ip", "netns", "exec", network_namespace, sys.executable, "-c", probe,
             running.url, running.token],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        outside = _provider(running.url, running.token).load().get_frozen_credentials()
    finally:
        running.stop()
    assert inside.returncode == 0, inside.stderr
    assert json.loads(inside.stdout)["AccessKeyId"] == outside.access_key == "ASIAJOB1"
    assert fetch.calls == 1


def test_the_machines_own_aws_files_and_identities_do_not_win_over_the_relay(
    tmp_path: Path, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore looks at ~/.aws and a web identity before a container endpoint: the
    server's own, on the local backend, would be the job's credentials."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIASERVERHOME\naws_secret_access_key = s\n"
    )
    request = dataclasses.replace(launch_request(tmp_path / "src"), aws_credentials=True)
    config = load(write_instances(tmp_path / "instances", request)["algo-1"])
    client = ServiceClient(service, "instance-token", "job-1", "algo-1")
    environ = {
        "HOME": str(home),
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/pod",
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(home / "token"),
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    relay = credentials_relay.serve(config, client, environ)
    assert relay is not None
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "HOME":
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    try:
        found = botocore.session.Session().get_credentials()
    finally:
        relay.stop()
    assert found is not None
    assert (found.method, found.access_key) == ("container-role", "ASIASERVICE")


def test_held_credentials_serve_while_the_service_cannot_give_fresh_ones() -> None:
    answers = [_credentials("ASIAHELD", timedelta(minutes=15))]

    def flaky() -> bytes:
        if answers:
            return answers.pop()
        raise OSError("the service is away")

    running = CredentialsRelay(flaky).start()
    try:
        first = json.loads(running.answer())
        # Due for a refresh (15 minutes left), which fails: the held ones still serve.
        again = json.loads(running.answer())
    finally:
        running.stop()
    assert first["AccessKeyId"] == again["AccessKeyId"] == "ASIAHELD"
