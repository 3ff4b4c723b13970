"""The runtime's final report names why its instance failed (``contract.failure_causes``)
beside the reason people read, for the reconciler to decide by without reading the text."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.instances import launch_request, start_runtime, write_instances


class _Service(ThreadingHTTPServer):
    """Runyard's instance routes, keeping each status report."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reports: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Service

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/status"):
            self.server.reports.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def service() -> Iterator[_Service]:
    server = _Service()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _final_report(service: _Service, tmp_path: Path, script: str, **spec: Any) -> dict[str, Any]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    base = write_instances(tmp_path / "job", launch_request(source, **spec))["algo-1"]
    runtime = start_runtime(base, RUNYARD_SERVICE_URL=service.url, RUNYARD_JOB_TOKEN="ryj_test")
    output, _ = runtime.communicate(timeout=120)
    assert service.reports, output
    return service.reports[-1]


def test_a_script_that_fails_is_the_scripts_failure(service: _Service, tmp_path: Path) -> None:
    report = _final_report(service, tmp_path, "raise SystemExit(3)\n")
    assert (report["phase"], report["exit_code"], report["failure_cause"]) == (
        "Failed",
        3,
        "ScriptError",
    )
    assert report["failure_reason"].startswith("AlgorithmError: ")


def test_a_script_killed_with_sigkill_ran_out_of_memory(service: _Service, tmp_path: Path) -> None:
    script = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    report = _final_report(service, tmp_path, script)
    assert (report["exit_code"], report["failure_cause"]) == (137, "OutOfMemory")
    assert report["failure_reason"].startswith("OutOfMemory: the script was killed with SIGKILL")


def test_an_input_that_is_not_there_is_the_jobs_configuration(
    service: _Service, tmp_path: Path
) -> None:
    missing = (tmp_path / "no-such-data").as_uri()
    report = _final_report(service, tmp_path, "print('never')\n", inputs={"train": missing})
    assert (report["phase"], report["failure_cause"]) == ("Failed", "JobConfiguration")
    assert report["failure_reason"].startswith("ClientError: ")


def test_only_a_failure_names_a_cause(service: _Service, tmp_path: Path) -> None:
    report = _final_report(service, tmp_path, "print('done')\n")
    assert report["phase"] == "Completed"
    assert all("failure_cause" not in sent for sent in service.reports)
