"""A real `runyard server` process: the line it prints once it answers, and a second
server on the same RUNYARD_HOME, which must leave the first one alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runyard.client import Client, discover, is_up, wait_until_up

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    home: Path
    url: str
    process: subprocess.Popen[bytes]
    stdout: Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env["RUNYARD_HOME"] = str(home)
    return env


def _runyard(home: Path, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "runyard", *args],
        env=_environment(home),
        cwd=REPO,
        **kwargs,  # type: ignore[call-overload]
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("server") / "home"
    port = _free_port()
    stdout = home.parent / "stdout.log"
    with open(stdout, "wb") as out, open(home.parent / "stderr.log", "wb") as err:
        process = _runyard(home, "server", "--port", str(port), stdout=out, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_up(url, alive=lambda: process.poll() is None):
            pytest.fail(f"the server did not start:\n{(home.parent / 'stderr.log').read_text()}")
        yield Server(home, url, process, stdout)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _ready_lines(server: Server) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = [line for line in server.stdout.read_text().splitlines() if "ready" in line]
        if lines:
            return lines
        time.sleep(0.1)
    return []


def test_server_says_where_it_is_and_where_its_token_is_once_it_answers(server: Server) -> None:
    lines = _ready_lines(server)
    assert lines == [f"Runyard is ready at {server.url} (admin token in {server.home / 'token'})"]


def test_a_second_server_on_the_same_home_leaves_the_first_alone(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_file = server.home / "server.json"
    before = server_file.read_bytes()
    port = server.url.rsplit(":", 1)[1]
    second = _runyard(
        server.home, "server", "--port", port, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = second.communicate(timeout=120)

    assert second.returncode == 1
    assert out == b""
    message = err.decode().strip().splitlines()
    assert message == [
        f"error: a Runyard server is already running on {server.home} at {server.url} "
        f"(pid {server.process.pid}); stop it first, or give this one another RUNYARD_HOME"
    ]
    # The CLI still finds the running server, and it still answers.
    assert server_file.read_bytes() == before
    monkeypatch.setenv("RUNYARD_HOME", str(server.home))
    url, token = discover()
    assert url == server.url
    with Client(url, token) as client:
        assert client.list_jobs()["items"] == []


def test_a_port_another_server_holds_is_named_before_any_ready_line(
    server: Server, tmp_path: Path
) -> None:
    # Another home, the running server's port: what answers there is not this server, so
    # it must not say it is ready.
    home = tmp_path / "home"
    port = server.url.rsplit(":", 1)[1]
    second = _runyard(
        home, "server", "--port", port, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = second.communicate(timeout=120)

    assert second.returncode == 1
    assert out == b""
    assert err.decode().strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is taken (Address already in use); choose another "
        "with --port or RUNYARD_PORT"
    ]
    assert not (home / "server.json").exists()
    assert is_up(server.url)


def test_a_setting_it_cannot_use_is_named_and_nothing_starts(tmp_path: Path) -> None:
    env = _environment(tmp_path / "home") | {
        "RUNYARD_API_WORKERS": "0",
        "RUNYARD_TOKEN_CACHE_SECONDS": "soon",
    }
    ran = subprocess.run(
        [sys.executable, "-m", "runyard", "server", "--port", str(_free_port())],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "error: RUNYARD_API_WORKERS='0': Input should be greater than or equal to 1" in (
        ran.stderr
    )
    assert "error: RUNYARD_TOKEN_CACHE_SECONDS='soon': Input should be a valid number" in (
        ran.stderr
    )
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "home" / "server.json").exists()


def _start_refused(home: Path, **variables: str) -> str:
    """What `runyard server` says when it refuses to start with ``variables``."""
    ran = subprocess.run(
        [sys.executable, "-m", "runyard", "server", "--port", str(_free_port())],
        env=_environment(home) | variables,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (home / "server.json").exists()
    return ran.stderr


def test_an_instance_type_it_cannot_use_is_named_with_its_field(tmp_path: Path) -> None:
    entries = [
        {"name": "ml.gr6.4xlarge", "vcpus": 16, "memory_gib": 128, "gpus": 1},
        {"name": "ml.trn2.48xlarge", "vcpus": 192, "memory_gib": 2048, "gpu": 16},
    ]
    stderr = _start_refused(tmp_path / "home", RUNYARD_INSTANCE_TYPES=json.dumps(entries))
    assert stderr.splitlines() == [
        "error: RUNYARD_INSTANCE_TYPES[1] (ml.trn2.48xlarge): gpu: Extra inputs are not permitted"
    ]


def test_a_rule_across_settings_is_told_without_the_other_settings(tmp_path: Path) -> None:
    # Such a rule's input is every setting: the secret key must not be shown with it.
    secret = "a-secret-key-that-must-stay-unseen"
    stderr = _start_refused(
        tmp_path / "home",
        RUNYARD_SECRET_KEY=secret,
        RUNYARD_CAPACITY='{"ml.gr6.4xlarge": 2}',
    )
    assert stderr.splitlines() == [
        "error: RUNYARD_CAPACITY: unknown instance type(s) ml.gr6.4xlarge (add a type with "
        "RUNYARD_INSTANCE_TYPES)"
    ]
    assert secret not in stderr
