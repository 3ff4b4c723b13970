"""A real `runyard server` with two API processes, JSON logs and the worker's metrics
port: /metrics sums what both API processes counted, every log line is one JSON object,
a job's lines name their request and job, and the worker serves its own /metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from runyard.client import wait_until_up
from service.observability.exposition import MULTIPROCESS_DIR
from tests.conftest import job_spec
from tests.runyard.test_server_startup import REPO, _free_port
from tests.service.observability.scrape import Samples, samples, value
from tests.service.test_api_workers import _descendants, _serving
from tests.timeouts import REQUEST_TIMEOUT


@dataclass
class Server:
    url: str
    token: str
    worker_metrics: str
    stderr: Path
    # Where jobs' sources may be (RUNYARD_FILE_ROOTS).
    files: Path
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("observed")
    home = base / "home"
    port, worker_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.pop(MULTIPROCESS_DIR, None)
    env |= {
        "RUNYARD_HOME": str(home),
        "RUNYARD_API_WORKERS": "2",
        "RUNYARD_LOG_FORMAT": "json",
        "RUNYARD_WORKER_METRICS_PORT": str(worker_port),
        "RUNYARD_FILE_ROOTS": str(base),
    }
    stderr, stdout = base / "stderr.log", base / "stdout.log"
    with open(stderr, "wb") as err, open(stdout, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "runyard", "server", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_up(url, alive=lambda: process.poll() is None):
            pytest.fail(f"the server did not start:\n{stderr.read_text()}")
        # The server asks /healthz itself until it says it is ready: done asking, on a
        # loaded machine too, before any test counts the requests it saw.
        deadline = time.monotonic() + 60
        while "Runyard is ready" not in stdout.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        token = (home / "token").read_text().strip()
        yield Server(url, token, f"http://127.0.0.1:{worker_port}/metrics", stderr, base, process)
        _end_every_job(url, token, home / "jobs")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _end_every_job(url: str, token: str, jobs_dir: Path, timeout: float = 90) -> None:
    """Stop what the tests left running and wait until every job has ended and its
    instances are gone: a server that stops keeps its jobs' instances running (they are
    adopted when it starts again), and this one does not start again."""
    headers = {"Authorization": f"Bearer {token}"}
    for job in httpx.get(
        f"{url}/v1/training-jobs", headers=headers, timeout=REQUEST_TIMEOUT
    ).json()["items"]:
        if job["status"] == "InProgress":
            httpx.post(
                f"{url}/v1/training-jobs/{job['name']}/stop",
                headers=headers,
                timeout=REQUEST_TIMEOUT,
            )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = httpx.get(
            f"{url}/v1/training-jobs", headers=headers, timeout=REQUEST_TIMEOUT
        ).json()["items"]
        ended = all(job["status"] in ("Completed", "Failed", "Stopped") for job in jobs)
        if ended and not (jobs_dir.is_dir() and any(jobs_dir.iterdir())):
            return
        time.sleep(0.5)
    pytest.fail(f"the tests' jobs did not end: {jobs}")


def _counted(url: str, route: str) -> float:
    # A new connection each time: the kernel hands it to either process.
    found = samples(httpx.get(f"{url}/metrics", timeout=REQUEST_TIMEOUT).text)
    return value(found, "runyard_http_requests_total", method="GET", route=route, status="200")


def test_metrics_sum_what_every_api_process_counted(server: Server) -> None:
    api = {pid for pid in _descendants(server.process.pid) if _serving(pid)}
    assert len(api) == 2
    directories = {
        dict(
            entry.split("=", 1)
            for entry in Path(f"/proc/{pid}/environ").read_text().split("\0")
            if "=" in entry
        ).get(MULTIPROCESS_DIR)
        for pid in api
    }
    assert len(directories) == 1
    assert None not in directories
    before = _counted(server.url, "/healthz")  # the server's own wait for itself asked it
    for _ in range(30):
        assert httpx.get(f"{server.url}/healthz", timeout=REQUEST_TIMEOUT).status_code == 200
    # Each scrape lands on either process, and each sees both processes' counts.
    seen = {_counted(server.url, "/healthz") for _ in range(6)}
    assert seen == {before + 30}
    (directory,) = directories
    writers = {path.stem.rsplit("_", 1)[-1] for path in Path(str(directory)).glob("*.db")}
    assert writers == {str(pid) for pid in api}


def _log_lines(stderr: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.read_text().splitlines() if line.strip()]


def test_log_lines_are_json_naming_the_request_and_the_job(server: Server) -> None:
    source = server.files / "watched"
    source.mkdir()
    (source / "train.py").write_text("import time\ntime.sleep(60)\n")
    headers = {"Authorization": f"Bearer {server.token}"}
    spec = job_spec(source, name="watched")
    created = httpx.post(
        f"{server.url}/v1/training-jobs", json=spec, headers=headers, timeout=REQUEST_TIMEOUT
    )
    assert created.status_code == 201, created.text
    stopped = httpx.post(
        f"{server.url}/v1/training-jobs/watched/stop",
        headers={**headers, "X-Request-ID": "stop-4711"},
        timeout=REQUEST_TIMEOUT,
    )
    assert stopped.status_code == 200, stopped.text
    assert stopped.headers["X-Request-ID"] == "stop-4711"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = _log_lines(server.stderr)  # every line parses: none is plain text
        stop = [line for line in lines if line.get("request_id") == "stop-4711"]
        if stop:
            break
        time.sleep(0.2)
    assert len(stop) == 1, server.stderr.read_text()[-3000:]
    assert stop[0]["job"] == "watched"
    assert stop[0]["message"] == "stop requested by admin"
    assert stop[0]["logger"] == "service.training.service"
    assert stop[0]["level"] == "INFO"
    assert {"time", "level", "logger", "message"} <= set(lines[0])


def test_the_worker_serves_its_reconcile_passes_and_lag(server: Server) -> None:
    source = server.files / "reconciled"
    source.mkdir()
    (source / "train.py").write_text("print('done')\n")
    headers = {"Authorization": f"Bearer {server.token}"}
    spec = job_spec(source, name="reconciled")
    assert (
        httpx.post(
            f"{server.url}/v1/training-jobs", json=spec, headers=headers, timeout=REQUEST_TIMEOUT
        ).status_code
        == 201
    )
    deadline = time.monotonic() + 60
    found: Samples = {}
    while time.monotonic() < deadline:
        job = httpx.get(
            f"{server.url}/v1/training-jobs/reconciled", headers=headers, timeout=REQUEST_TIMEOUT
        ).json()
        if job["status"] == "Completed":
            found = samples(httpx.get(server.worker_metrics, timeout=REQUEST_TIMEOUT).text)
            break
        time.sleep(0.3)
    assert found, f"the job did not complete: {job}"
    assert value(found, "runyard_reconcile_lag_seconds_count") >= 1
    passes = {
        dict(labels)["stage"] for name, labels in found if name == "runyard_reconcile_passes_total"
    }
    assert {"Queued", "Running"} <= passes
    assert value(found, "runyard_db_pool_capacity") > 0
