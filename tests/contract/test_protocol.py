"""The instance protocol round-trips: what the runtime's client sends over HTTP is what the
service's validators take, and gives back the same message; the bounds the contract sets
are the ones the service enforces."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from contract import protocol
from contract.failure_causes import FailureCause
from contract.limits import MAX_LOG_BATCH
from contract.phases import Phase
from contract.protocol import (
    MAX_INSTANCE_METRIC_ROWS,
    Endpoint,
    InstanceMetric,
    InstanceMetrics,
    InterruptionNotice,
    LogBatch,
    StatusReport,
)
from runtime.reporting.reporter import ServiceClient
from service.kit.protocol import as_message, validate_body
from service.logs.schemas import LogBatchBody, Packed, received_lines
from service.metrics.instance import InstanceMetricsBody
from service.training.instance_messages import InterruptionNoticeBody, StatusReportBody

# Every message of the protocol, and the service's validator of it.
VALIDATORS: dict[type[Any], type[BaseModel]] = {
    StatusReport: StatusReportBody,
    LogBatch: LogBatchBody,
    InterruptionNotice: InterruptionNoticeBody,
    InstanceMetrics: InstanceMetricsBody,
}
NOW = datetime(2026, 11, 28, 12, 30, 15, 123456, tzinfo=UTC)
MESSAGES = [
    StatusReport(Phase.DOWNLOADING, NOW),
    StatusReport(
        Phase.FAILED,
        NOW,
        message="ended",
        exit_code=-9,
        failure_reason="AlgorithmError: out of memory",
        model_uri="s3://bucket/jobs/a/model.tar.gz",
        attempt=2,
    ),
    StatusReport(
        Phase.FAILED,
        NOW,
        exit_code=137,
        failure_reason="OutOfMemory: the script was killed with SIGKILL (exit code 137)",
        failure_cause=FailureCause.OUT_OF_MEMORY,
    ),
    LogBatch(
        7, [(1_764_333_015.25, "stdout", "epoch 1 loss=0.5"), (1_764_333_016.0, "runtime", "")]
    ),
    InterruptionNotice(),
    InterruptionNotice("reclaimed at 12:30", attempt=0),
    InstanceMetrics(
        [
            (1_764_333_015.25, InstanceMetric.CPU, 350.5),
            (1_764_333_015.25, InstanceMetric.GPU_MEMORY, 0.0),
        ]
    ),
]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A service that keeps what it is sent, by path."""

    received: dict[str, bytes]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.received[self.path] = self.rfile.read(length)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, dict[str, bytes]]]:
    received: dict[str, bytes] = {}
    handler = type("Recorder", (_Recorder,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("message", MESSAGES, ids=lambda message: type(message).__name__)
def test_what_the_runtime_sends_the_service_reads_back(
    message: protocol.InstanceMessage, recorder: tuple[str, dict[str, bytes]]
) -> None:
    url, received = recorder
    client = ServiceClient(url, "token", "my job", "algo-1")
    endpoint = {
        StatusReport: Endpoint.STATUS,
        LogBatch: Endpoint.LOGS,
        InterruptionNotice: Endpoint.INTERRUPTION,
        InstanceMetrics: Endpoint.METRICS,
    }[type(message)]
    client.post(endpoint, message)

    path = protocol.JOBS_PATH + protocol.instance_route(endpoint)
    assert received.keys() == {path.format(name="my%20job", host="algo-1")}
    validated = validate_body(VALIDATORS[type(message)], received.popitem()[1])
    assert as_message(type(message), validated) == message


def test_an_instance_path_is_its_route_filled_in_and_below_its_url() -> None:
    path = protocol.instance_path("my job", "algo-1", Endpoint.INTERRUPTION)
    assert path == "/v1/training-jobs/my%20job/instances/algo-1/interruption"
    base = protocol.instance_url("http://service:8080/", "my job", "algo-1")
    assert f"{base}/{Endpoint.INTERRUPTION}" == f"http://service:8080{path}"


def test_every_message_has_a_validator_with_its_fields() -> None:
    for message, validator in VALIDATORS.items():
        names = {item.name for item in dataclasses.fields(message)}
        assert names <= set(validator.model_fields), message


@pytest.mark.parametrize(
    ("validator", "body", "field"),
    [
        (
            StatusReportBody,
            {"phase": "Training", "time": NOW.isoformat(), "message": "x" * 4097},
            "message",
        ),
        (
            StatusReportBody,
            {"phase": "Training", "time": NOW.isoformat(), "attempt": -1},
            "attempt",
        ),
        (StatusReportBody, {"phase": "Dancing", "time": NOW.isoformat()}, "phase"),
        (
            StatusReportBody,
            {"phase": "Failed", "time": NOW.isoformat(), "failure_cause": "Gremlins"},
            "failure_cause",
        ),
        (LogBatchBody, {"first_seq": 0, "rows": []}, "first_seq"),
        (
            LogBatchBody,
            {"first_seq": 1, "rows": [[1.0, "stdout", "x"]] * (MAX_LOG_BATCH + 1)},
            "rows",
        ),
        (LogBatchBody, {"first_seq": 1, "rows": [[1.0, "console", "x"]]}, "rows"),
        (InterruptionNoticeBody, {"message": ""}, "message"),
        (InterruptionNoticeBody, {"message": "x" * 513}, "message"),
        (InstanceMetricsBody, {"rows": []}, "rows"),
        (
            InstanceMetricsBody,
            {"rows": [[1.0, "CPUUtilization", 1.0]] * (MAX_INSTANCE_METRIC_ROWS + 1)},
            "rows",
        ),
    ],
)
def test_the_contract_bounds_are_the_services(
    validator: type[BaseModel], body: dict[str, Any], field: str
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        validate_body(validator, json.dumps(body).encode())
    assert all(error["loc"][:2] == ("body", field) for error in caught.value.errors())


def test_a_packed_batch_is_received_numbered_on_from_its_first_seq() -> None:
    batch = LogBatch(41, [(1.5, "stdout", "a\x00b"), (2.0, "stderr", "c")])
    received = received_lines(json.dumps(protocol.body(batch)).encode())
    assert received == Packed(41, [(1.5, "stdout", "a\ufffdb"), (2.0, "stderr", "c")])
