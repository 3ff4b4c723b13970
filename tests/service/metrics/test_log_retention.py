"""Log retention: the lines and metric points of jobs that ended long ago are deleted;
live and recently ended jobs keep theirs, and every job keeps its final metrics."""

from __future__ import annotations

import uuid
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery.exceptions import DuplicateTaskNameWarning
from pydantic import ValidationError
from sqlalchemy import func, select

from service.jobs.models import JobFinalMetric, MetricPoint, MetricRollup, TrainingJob
from service.kit.db import session_scope, to_micros, utcnow
from service.logs import repository
from service.logs.schemas import Line
from service.metrics import rollups
from service.metrics.retention import Pruned, prune_ended_jobs
from service.settings import Settings
from tests.conftest import stored_line_count
from worker.celery_app import create_celery

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def _job(
    database_url: str, name: str, status: str, ended_at: datetime | None, lines: int = 3
) -> str:
    """A job with ``lines`` log lines, each carrying one metric point, and a final metric."""
    job_id = uuid.uuid4().hex
    created = (ended_at or NOW) - 100 * DAY
    with session_scope(database_url) as session:
        session.add(
            TrainingJob(
                id=job_id,
                name=name,
                spec={"instance_count": 1, "instance_type": "local"},
                backend="local",
                status=status,
                secondary_status=status,
                created_at=created,
                ended_at=ended_at,
            )
        )
        session.flush()
        for seq in range(1, lines + 1):
            time = created + seq * timedelta(seconds=1)
            session.add(
                MetricPoint(
                    job_id=job_id, name="loss", host="algo-1", seq=seq, time=time, value=float(seq)
                )
            )
        # Two lines a chunk: a batch of two lines deletes one chunk.
        for first in range(1, lines + 1, 2):
            run = range(first, min(first + 2, lines + 1))
            repository.insert_lines(
                session,
                job_id,
                "algo-1",
                [
                    Line(
                        seq,
                        to_micros(created + seq * timedelta(seconds=1)),
                        "stdout",
                        f"loss: {seq}",
                    )
                    for seq in run
                ],
            )
        session.add(
            JobFinalMetric(job_id=job_id, name="loss", value=3.0, time=created, host="algo-1")
        )
        session.flush()
        rollups.add(session, session.scalars(select(MetricPoint).filter_by(job_id=job_id)))
    return job_id


def _counts(database_url: str, job_id: str) -> tuple[int, int, int]:
    with session_scope(database_url, readonly=True) as session:
        return (
            stored_line_count(session, job_id),
            *(
                session.scalar(
                    select(func.count()).select_from(table).where(table.job_id == job_id)
                )
                or 0
                for table in (MetricPoint, JobFinalMetric)
            ),
        )  # type: ignore[return-value]


def test_only_jobs_ended_before_the_retention_lose_their_lines(database_url: str) -> None:
    old = _job(database_url, "old", "Completed", NOW - 31 * DAY)
    old_failed = _job(database_url, "old-failed", "Failed", NOW - 400 * DAY, lines=2)
    recent = _job(database_url, "recent", "Stopped", NOW - 29 * DAY)
    # Started long ago and still going: never pruned, whatever its age.
    live = _job(database_url, "live", "InProgress", None)
    stopping = _job(database_url, "stopping", "Stopping", None)

    pruned = prune_ended_jobs(database_url, 30, now=NOW)
    assert pruned == Pruned(log_lines=5, metric_points=5)
    assert _counts(database_url, old) == (0, 0, 1)
    assert _counts(database_url, old_failed) == (0, 0, 1)
    for kept in (recent, live, stopping):
        assert _counts(database_url, kept) == (3, 3, 1)

    # Nothing left to do: a second run deletes nothing more.
    assert prune_ended_jobs(database_url, 30, now=NOW) == Pruned(0, 0)


def _rollups(database_url: str, job_id: str) -> int:
    with session_scope(database_url, readonly=True) as session:
        count = select(func.count()).select_from(MetricRollup).filter_by(job_id=job_id)
        return int(session.scalar(count) or 0)


def test_lines_go_in_batches_each_committed_on_its_own(database_url: str) -> None:
    old = _job(database_url, "old", "Completed", NOW - 31 * DAY, lines=5)
    live = _job(database_url, "live", "InProgress", None, lines=5)
    assert _rollups(database_url, old) == 1

    reported: list[tuple[Pruned, tuple[int, int, int]]] = []

    def progress(pruned: Pruned) -> None:
        # Read in a session of its own: what it sees is what each batch committed.
        reported.append((pruned, _counts(database_url, old)))

    pruned = prune_ended_jobs(database_url, 30, now=NOW, batch_rows=2, progress=progress)

    assert pruned == Pruned(log_lines=5, metric_points=5)
    assert reported == [
        (Pruned(2, 0), (3, 5, 1)),
        (Pruned(4, 0), (1, 5, 1)),
        (Pruned(5, 0), (0, 5, 1)),
        (Pruned(5, 2), (0, 3, 1)),
        (Pruned(5, 4), (0, 1, 1)),
        (Pruned(5, 5), (0, 0, 1)),
    ]
    assert _rollups(database_url, old) == 0
    assert _counts(database_url, live) == (5, 5, 1)
    assert _rollups(database_url, live) == 1


def test_zero_days_keeps_everything(database_url: str) -> None:
    job = _job(database_url, "ancient", "Completed", NOW - 3650 * DAY)
    assert prune_ended_jobs(database_url, 0, now=NOW) == Pruned(0, 0)
    assert _counts(database_url, job) == (3, 3, 1)


def test_retention_days_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(home=tmp_path).log_retention_days == 30
    monkeypatch.setenv("RUNYARD_LOG_RETENTION_DAYS", "0")
    assert Settings(home=tmp_path).log_retention_days == 0
    monkeypatch.setenv("RUNYARD_LOG_RETENTION_DAYS", "-1")
    with pytest.raises(ValidationError, match="log_retention_days"):
        Settings(home=tmp_path)


def test_beat_runs_the_pruning_task_hourly(settings: Settings) -> None:
    app = create_celery(settings.model_copy(update={"log_retention_days": 7}))
    entry = app.conf.beat_schedule["prune-logs"]
    assert entry["task"] == "runyard.prune_logs"
    assert entry["schedule"] == 3600.0

    old = _job(settings.database_url, "old", "Completed", utcnow() - 8 * DAY)
    recent = _job(settings.database_url, "recent", "Completed", utcnow() - 6 * DAY)
    with warnings.catch_warnings():
        # Building the task registry also re-registers the shared tasks of apps that
        # earlier tests built in this process (reconcile, sweep, ...), which Celery warns
        # about; this task is not shared, so what runs here is this app's own.
        warnings.simplefilter("ignore", DuplicateTaskNameWarning)
        task = app.tasks["runyard.prune_logs"]
    task()
    assert _counts(settings.database_url, old) == (0, 0, 1)
    assert _counts(settings.database_url, recent) == (3, 3, 1)
