"""What the worker tells operators about a reconcile: its log lines name the job being
driven (as JSON with RUNYARD_LOG_FORMAT=json), and its passes are counted by stage."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from provisioning.local.backend import LocalBackend
from service.observability.logs import JsonFormatter
from service.settings import Settings
from tests.jobs import job_id, job_state, submit
from worker.reconciler import Reconciler


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """What the worker's loggers write, formatted as RUNYARD_LOG_FORMAT=json has them."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("worker")
    logger.addHandler(handler)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


def _passes(stage: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "runyard_reconcile_passes_total", {"stage": stage, "outcome": outcome}
    )
    return value or 0.0


def test_a_failing_pass_is_logged_naming_its_job_and_counted(
    settings: Settings, source_dir: Path, json_lines: io.StringIO
) -> None:
    name = submit(settings, source_dir, name="cannot-launch")

    def broken(_name: str, _settings: Settings) -> LocalBackend:
        return LocalBackend(settings.jobs_dir, python="/nonexistent/python3", teardown_grace=1)

    before = _passes("Queued", "done")
    Reconciler(settings, broken).reconcile(job_id(settings, name))
    assert job_state(settings, name)["status"] == "Failed"

    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    failed = [line for line in lines if line["message"].startswith("reconciling")]
    assert len(failed) == 1, lines
    assert failed[0]["job"] == "cannot-launch"
    assert failed[0]["level"] == "ERROR"
    assert "FileNotFoundError" in failed[0]["exception"]
    assert "request_id" not in failed[0]
    # Admitted and launched in one pass, whose failure the pass itself recorded.
    assert _passes("Queued", "done") - before == 1
