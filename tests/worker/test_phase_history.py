"""A job's secondary-status history lists every phase its instances went through, at the
times they reached it, however late a pass sees their reports: a job that downloaded,
trained and uploaded between two passes still shows Downloading, Training and Uploading,
as SageMaker's SecondaryStatusTransitions do."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contract import protocol
from contract.phases import Phase
from contract.protocol import StatusReport
from service.kit.db import session_scope, utcnow
from service.kit.protocol import as_message, validate_body
from service.settings import Settings
from service.training import service
from service.training.instance_messages import StatusReportBody
from tests.instances import SleepingInstances
from tests.jobs import job_id, named, submit
from worker.reconciler import Reconciler


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5})


def _report(
    settings: Settings, name: str, host: str, phase: str, at: datetime, **fields: Any
) -> None:
    """What the runtime on ``host`` reported at ``at`` (its clock)."""
    sent = StatusReport(phase=Phase(phase), time=at, **fields)
    body = json.dumps(protocol.body(sent), default=str).encode()
    sent = as_message(StatusReport, validate_body(StatusReportBody, body))
    with session_scope(settings.database_url) as session:
        service.record_report(session, settings, named(session, name), host, sent)


def _history(settings: Settings, name: str) -> list[tuple[str, str, datetime, datetime | None]]:
    with session_scope(settings.database_url, readonly=True) as session:
        return [
            (t.status, t.secondary_status, t.start_time, t.end_time)
            for t in named(session, name).transitions
        ]


def _launched(settings: Settings, source_dir: Path, **spec: Any) -> tuple[str, Callable[[], None]]:
    name = submit(settings, source_dir, **spec)
    reconciler = Reconciler(settings, lambda _n, _s: SleepingInstances(settings.jobs_dir))

    def reconcile() -> None:
        reconciler.reconcile(job_id(settings, name))

    reconcile()
    return name, reconcile


def test_a_job_seen_only_once_it_completed_shows_each_phase_at_its_time(
    settings: Settings, source_dir: Path
) -> None:
    name, reconcile = _launched(settings, source_dir, instance_count=2)
    start = utcnow()
    at = {step: start + timedelta(milliseconds=10 * step) for step in range(8)}
    # Both instances went the whole way before the worker looked again; algo-2 (no model
    # to upload) reached each phase after algo-1.
    _report(settings, name, "algo-1", "Downloading", at[0])
    _report(settings, name, "algo-2", "Downloading", at[1])
    _report(settings, name, "algo-1", "Training", at[2])
    _report(settings, name, "algo-2", "Training", at[3])
    _report(settings, name, "algo-2", "Completed", at[4], exit_code=0)
    _report(settings, name, "algo-1", "Uploading", at[5])
    _report(settings, name, "algo-1", "Completed", at[6], exit_code=0)
    # Looked at once they all lie in the past (a time yet to come is read as now).
    time.sleep(max(0.0, (at[7] - utcnow()).total_seconds()))
    reconcile()
    history = _history(settings, name)
    assert [(status, secondary) for status, secondary, *_ in history] == [
        ("InProgress", "Starting"),
        ("InProgress", "LaunchingInstances"),
        ("InProgress", "Downloading"),
        ("InProgress", "Training"),
        ("InProgress", "Uploading"),
        ("Completed", "Completed"),
    ]
    # Each phase began when the last instance that went through it reached it.
    starts = {secondary: begun for _, secondary, begun, _ in history}
    assert (starts["Downloading"], starts["Training"], starts["Uploading"]) == (at[1], at[3], at[5])
    # One after the other, each ending where the next begins.
    for before, after in itertools.pairwise(history):
        assert before[3] == after[2]
        assert before[2] <= after[2]


def test_a_phase_seen_late_is_recorded_before_the_one_the_job_is_in(
    settings: Settings, source_dir: Path
) -> None:
    name, reconcile = _launched(settings, source_dir)
    start = utcnow()
    _report(settings, name, "algo-1", "Downloading", start)
    _report(settings, name, "algo-1", "Training", start + timedelta(milliseconds=5))
    reconcile()  # sees it training, not that it downloaded first
    assert [secondary for _, secondary, *_ in _history(settings, name)][2:] == [
        "Downloading",
        "Training",
    ]
    _report(settings, name, "algo-1", "Completed", utcnow(), exit_code=0)
    reconcile()  # and its instance is gone


def test_an_instance_that_completed_trained_though_it_never_said_so(
    settings: Settings, source_dir: Path
) -> None:
    name, reconcile = _launched(settings, source_dir)
    _report(settings, name, "algo-1", "Downloading", utcnow())
    reconcile()
    # Its report of Training was lost (the runtime gives up on one after a while).
    _report(settings, name, "algo-1", "Completed", utcnow(), exit_code=0)
    reconcile()
    assert [secondary for _, secondary, *_ in _history(settings, name)][2:] == [
        "Downloading",
        "Training",
        "Completed",  # it stored no model: it never said it was Uploading
    ]


def test_a_job_that_failed_at_its_download_never_trained(
    settings: Settings, source_dir: Path
) -> None:
    name, reconcile = _launched(settings, source_dir)
    _report(settings, name, "algo-1", "Downloading", utcnow())
    reason = "ClientError: Data download failed: channel train: no S3 objects found under s3://b/x"
    _report(settings, name, "algo-1", "Failed", utcnow(), exit_code=1, failure_reason=reason)
    reconcile()
    assert [secondary for _, secondary, *_ in _history(settings, name)] == [
        "Starting",
        "LaunchingInstances",
        "Downloading",
        "Failed",
    ]
