"""EC2's spot interruption warning, read by the runtime from a local server that speaks the
instance metadata service's IMDSv2 protocol, and passed on to the service."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runtime.reporting.spot import SpotNoticeWatcher
from tests.instances import launch_request, start_runtime, write_instances

TOKEN = "imds-session-token"
NOTICE = {"action": "terminate", "time": "2026-11-23T12:00:00Z"}


class _Fake(ThreadingHTTPServer):
    """The metadata service (a notice once ``noticed`` is set; an answer that is not HTTP
    while ``garbled`` is) and Runyard's report routes (refusing interruption notices while
    ``refusing`` is set)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.noticed = threading.Event()
        self.garbled = threading.Event()
        self.refusing = threading.Event()
        self.garbled_answers = 0
        self.posts: list[tuple[str, dict[str, Any]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Fake

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds"
        ):
            self._answer(200, TOKEN)
        else:
            self._answer(400, "")

    def do_GET(self) -> None:
        if self.server.garbled.is_set():
            self.server.garbled_answers += 1
            self.wfile.write(b"\x00 not an HTTP answer\r\n\r\n")
        elif self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._answer(401, "")  # IMDSv2: no session token, no answer
        elif self.path == "/latest/meta-data/spot/instance-action" and self.server.noticed.is_set():
            self._answer(200, json.dumps(NOTICE))
        else:
            self._answer(404, "")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        kind = self.path.rsplit("/", 1)[-1]
        self.server.posts.append((kind, body))
        if kind == "interruption" and self.server.refusing.is_set():
            self._answer(409, '{"detail": "not now"}')
        else:
            self._answer(200, "{}")

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[_Fake]:
    server = _Fake()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_no_notice_until_ec2_gives_one(fake: _Fake) -> None:
    watcher = SpotNoticeWatcher(lambda _message: None, imds_url=fake.url)
    assert watcher.check() is None
    fake.noticed.set()
    assert watcher.check() == "EC2 will terminate this instance at 2026-11-23T12:00:00Z"


def test_an_unreachable_metadata_service_is_no_notice() -> None:
    watcher = SpotNoticeWatcher(lambda _message: None, imds_url="http://127.0.0.1:1")
    assert watcher.check() is None


def test_the_watcher_calls_back_once(fake: _Fake) -> None:
    notices: list[str] = []
    watcher = SpotNoticeWatcher(notices.append, imds_url=fake.url, interval=0.02).start()
    time.sleep(0.1)
    assert notices == []
    fake.noticed.set()
    deadline = time.monotonic() + 5
    while not notices and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    watcher.stop()
    assert notices == ["EC2 will terminate this instance at 2026-11-23T12:00:00Z"]


def test_the_runtime_on_a_spot_instance_tells_the_service(fake: _Fake, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('training', flush=True)\n"
        "time.sleep(60)\n"
    )
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    config = base / "input" / "config" / "runyard.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "spot_notice": "ec2"}))
    fake.noticed.set()
    runtime = start_runtime(
        base,
        RUNYARD_SERVICE_URL=fake.url,
        RUNYARD_JOB_TOKEN="ryj_test",
        RUNYARD_IMDS_URL=fake.url,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(kind == "interruption" for kind, _ in fake.posts):
            assert time.monotonic() < deadline, fake.posts
            time.sleep(0.05)
    finally:
        runtime.send_signal(signal.SIGTERM)  # what the service answers with
        runtime.communicate(timeout=30)
    [notice] = [body for kind, body in fake.posts if kind == "interruption"]
    assert notice == {
        "message": "EC2 will terminate this instance at 2026-11-23T12:00:00Z",
        "attempt": 0,
    }
    phases = [body["phase"] for kind, body in fake.posts if kind == "status"]
    assert phases[-1] == "Stopped"
    assert all(body.get("attempt") == 0 for kind, body in fake.posts if kind == "status")


def test_a_garbled_answer_does_not_end_the_watch(fake: _Fake) -> None:
    notices: list[str] = []
    fake.garbled.set()
    watcher = SpotNoticeWatcher(notices.append, imds_url=fake.url, interval=0.02).start()
    try:
        deadline = time.monotonic() + 10
        while fake.garbled_answers < 3:  # asked again after each one
            assert time.monotonic() < deadline, fake.garbled_answers
            time.sleep(0.01)
        fake.noticed.set()
        fake.garbled.clear()
        while not notices:
            assert time.monotonic() < deadline, "the notice never came through"
            time.sleep(0.01)
    finally:
        watcher.stop()
    assert notices == ["EC2 will terminate this instance at 2026-11-23T12:00:00Z"]


def test_the_scripts_are_stopped_even_when_the_service_is_not_told(
    fake: _Fake, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('saving on SIGTERM', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('training', flush=True)\n"
        "time.sleep(60)\n"
    )
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    config = base / "input" / "config" / "runyard.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "spot_notice": "ec2"}))
    fake.refusing.set()
    runtime = start_runtime(
        base,
        RUNYARD_SERVICE_URL=fake.url,
        RUNYARD_JOB_TOKEN="ryj_test",
        RUNYARD_IMDS_URL=fake.url,
    )
    assert runtime.stdout is not None
    try:
        lines = []
        for line in runtime.stdout:  # the script's handler is in place once it trains
            lines.append(line)
            if "[stdout] training" in line:
                break
        fake.noticed.set()
        # No SIGTERM from the test: the service, never told, would send none.
        output = "".join(lines) + runtime.communicate(timeout=30)[0]
    finally:
        runtime.kill()
    assert runtime.returncode == 0, output
    assert "Could not tell the service of the notice: stopping the scripts here" in output
    assert "[stdout] saving on SIGTERM" in output
    assert [kind for kind, _ in fake.posts].count("interruption") == 1
    phases = [body["phase"] for kind, body in fake.posts if kind == "status"]
    assert phases[-1] == "Stopped"
