"""A script's output, from the runtime as a real process to the API on a real port and its
database: every line stored, in order, in batches as large as the service takes, and
lines shipped while the script still runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from contract.limits import MAX_LOG_BATCH, MAX_LOG_BATCH_BODY
from provisioning.local.backend import free_port
from runtime.reporting.reporter import LogShipper, ServiceClient
from service.app import create_app
from service.settings import Settings
from tests.conftest import submit_for_instances
from tests.instances import launch_request, start_runtime, write_instances
from tests.service.sagemaker.live import serving


class _CountingLogPosts:
    """The API, counting the log batches it is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log_posts = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.log_posts += scope["path"].endswith("/logs")
        await self.app(scope, receive, send)


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[str, _CountingLogPosts]]:
    """The API on a real port, for runtimes to report to; its URL."""
    app = _CountingLogPosts(create_app(settings))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the API did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(30)


def _start(
    tmp_path: Path, api: TestClient, settings: Settings, url: str, script: str
) -> tuple[Any, Path]:
    """Submits a job over the API and starts its instance's runtime, reporting to ``url``."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(script)
    headers = submit_for_instances(api, settings, source)
    token = headers["Authorization"].removeprefix("Bearer ")
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    runtime = start_runtime(base, RUNYARD_SERVICE_URL=url, RUNYARD_JOB_TOKEN=token)
    return runtime, base


def _messages(api: TestClient, stream: str) -> list[str]:
    """The job's lines of ``stream``, in the order the API gives them (by time)."""
    messages: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 10_000, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/training-jobs/job-1/logs", params=params).json()
        messages += [event["message"] for event in page["events"] if event["stream"] == stream]
        cursor = page["next_cursor"]
        if cursor is None:
            return messages


def test_a_burst_of_lines_is_stored_whole_in_few_batches(
    tmp_path: Path,
    api: TestClient,
    settings: Settings,
    served: tuple[str, _CountingLogPosts],
) -> None:
    url, counted = served
    lines = 20_000
    script = f"for i in range({lines}):\n    print(f'progress {{i}}')\n"
    runtime, _base = _start(tmp_path, api, settings, url, script)
    output, _ = runtime.communicate(timeout=120)
    assert runtime.returncode == 0, output[-2000:]
    # Every line, in the order printed: their times rise with their numbers.
    assert _messages(api, "stdout") == [f"progress {i}" for i in range(lines)]
    # A burst goes out in batches as large as the service takes, each a request and a
    # commit; the runtime's own few lines ride along.
    assert counted.log_posts <= lines // MAX_LOG_BATCH + 3, counted.log_posts


def test_lines_are_stored_while_the_script_still_runs(
    tmp_path: Path,
    api: TestClient,
    settings: Settings,
    served: tuple[str, _CountingLogPosts],
) -> None:
    url, _counted = served
    go_on = tmp_path / "go-on"
    script = (
        "import os, time\n"
        "print('epoch 1 done', flush=True)\n"
        f"while not os.path.exists({str(go_on)!r}):\n"
        "    time.sleep(0.05)\n"
    )
    runtime, _base = _start(tmp_path, api, settings, url, script)
    try:
        deadline = time.monotonic() + 60
        while "epoch 1 done" not in _messages(api, "stdout"):
            assert runtime.poll() is None, runtime.communicate()[0]
            assert time.monotonic() < deadline, "the line never reached the service"
            time.sleep(0.1)
    finally:
        go_on.touch()
        output, _ = runtime.communicate(timeout=60)
    assert runtime.returncode == 0, output[-2000:]


def test_batches_of_escaped_characters_fit_the_smallest_body_limit(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """A progress bar's "█" is six bytes in the body ("\\u2588"): batches are cut by the
    bytes they send, so even the smallest body limit a server may have takes each."""
    headers = submit_for_instances(api, settings, source_dir)
    token = headers["Authorization"].removeprefix("Bearer ")
    strictest = settings.model_copy(update={"max_request_bytes": MAX_LOG_BATCH_BODY})
    app = _CountingLogPosts(create_app(strictest))
    lines = [f"{i} " + "█" * 2500 for i in range(2000)]  # 30 MB as the body writes them
    with serving(app) as url:
        shipper = LogShipper(ServiceClient(url, token, "job-1", "algo-1"), echo=False).start()
        for line in lines:
            shipper.emit("stdout", line)
        shipper.close()
    assert _messages(api, "stdout") == lines
    assert app.log_posts >= 30_000_000 // MAX_LOG_BATCH_BODY
