"""Runyard's API under uvicorn in a thread, and boto3 clients of it signed with a token's
AWS credentials: what SageMaker's clients see, without a worker running the jobs."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from botocore.config import Config
from botocore.validate import ParamValidator
from starlette.types import ASGIApp

from tests.aws import shared_session

REGION = "eu-west-1"
# One attempt per call: an error a test provokes reaches it once, not after retries.
NO_RETRIES = Config(retries={"mode": "standard", "max_attempts": 1})
# Requests botocore would refuse before sending: they reach the server, as curl's would.
UNCHECKED = NO_RETRIES.merge(Config(parameter_validation=False))


@contextlib.contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """The app's base URL while it is served."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, args=([sock],), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def client(service: str, url: str, credentials: dict[str, str], config: Config = NO_RETRIES) -> Any:
    return shared_session().client(
        service,
        endpoint_url=url,
        config=config,
        region_name=REGION,
        aws_access_key_id=credentials["access_key_id"],
        aws_secret_access_key=credentials["secret_access_key"],
    )


def check_answer(client: Any, operation: str, answer: dict[str, Any]) -> None:
    """Raises unless botocore's own model of ``operation``'s output accepts ``answer``
    (as botocore parsed it): every required member, every type."""
    shape = client.meta.service_model.operation_model(operation).output_shape
    answer = {k: v for k, v in answer.items() if k != "ResponseMetadata"}
    report = ParamValidator().validate(answer, shape)
    if report.has_errors():
        raise AssertionError(report.generate_report())
