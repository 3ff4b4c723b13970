"""Tuning jobs driven as the API and the worker would, for the tests: create over REST,
run the tuner's passes, and end trials' training jobs as their instances would."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from service.jobs.models import JobFinalMetric, MetricPoint, TrainingJob
from service.jobs.states import Stage
from service.kit.db import session_scope, utcnow
from service.metrics import service as metrics
from service.settings import Settings
from service.tuning import tuner
from service.tuning.models import TuningJob
from tests.conftest import job_spec


def tuning_spec(source_dir: Path, **overrides: Any) -> dict[str, Any]:
    training = job_spec(
        source_dir,
        metric_definitions=[{"name": "loss", "regex": "loss=([0-9.]+)"}],
        hyperparameters={"epochs": 2},
    )
    del training["name"]
    spec: dict[str, Any] = {
        "name": "tune-1",
        "strategy": "Random",
        "objective": {"type": "Minimize", "metric_name": "loss"},
        "resource_limits": {"max_number_of_training_jobs": 4, "max_parallel_training_jobs": 2},
        "parameter_ranges": {
            "continuous": [
                {"name": "lr", "min_value": 0.0001, "max_value": 0.1, "scaling_type": "Logarithmic"}
            ],
            "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
        },
        "random_seed": 42,
        "training_job": training,
    }
    spec.update(overrides)
    return spec


def create(api: TestClient, source_dir: Path, **overrides: Any) -> dict[str, Any]:
    answer = api.post("/v1/tuning-jobs", json=tuning_spec(source_dir, **overrides))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def refused(api: TestClient, spec: dict[str, Any], loc: list[Any], message: str) -> None:
    """Creating the tuning job ``spec`` is refused with one error naming ``loc``, and
    nothing is created."""
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", *loc]
    assert message in error["msg"]
    assert api.get("/v1/tuning-jobs").json()["items"] == []


def advance(settings: Settings, name: str = "tune-1", project: str = "default") -> None:
    """One pass of the tuner, as the worker's task runs it."""
    with session_scope(settings.database_url, readonly=True) as session:
        tuning_id = session.scalar(
            select(TuningJob.id).where(TuningJob.name == name, TuningJob.project == project)
        )
    assert tuning_id is not None
    tuner.advance(settings, tuning_id)


def describe(api: TestClient, name: str = "tune-1") -> dict[str, Any]:
    answer = api.get(f"/v1/tuning-jobs/{name}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def end_job(
    settings: Settings,
    name: str,
    status: str = "Completed",
    loss: float | None = None,
    metric: str = "loss",
) -> None:
    """End a trial's training job as the reconciler would, with the final value of its
    loss metric (or of ``metric``; as extracted from its log)."""
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        now = utcnow()
        job.status = job.secondary_status = status
        job.stage = Stage.ENDED
        job.ended_at = now
        if status == "Failed":
            job.failure_reason = "AlgorithmError: the script failed"
        if loss is not None:
            session.add(
                JobFinalMetric(job_id=job.id, name=metric, value=loss, time=now, host="algo-1")
            )


def training_jobs(settings: Settings) -> list[dict[str, Any]]:
    """Every training job stored, oldest first."""
    with session_scope(settings.database_url, readonly=True) as session:
        rows = session.scalars(
            select(TrainingJob).order_by(TrainingJob.created_at, TrainingJob.name)
        )
        return [
            {"name": job.name, "status": job.status, "hyperparameters": job.record.hyperparameters}
            for job in rows
        ]


def report(
    settings: Settings, name: str, losses: list[float], host: str = "algo-1", metric: str = "loss"
) -> None:
    """The trial's training job logs these values of its loss after those it logged, one a
    line, stored as metric ingestion stores them (the latest is its final value)."""
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        stored = session.scalars(
            select(MetricPoint.seq)
            .where(MetricPoint.job_id == job.id, MetricPoint.host == host)
            .order_by(MetricPoint.seq.desc())
        ).first()
        seq = (stored or 0) + 1
        now = utcnow()
        metrics.store(
            session,
            [
                metrics.Point(
                    job.id,
                    metric,
                    host,
                    seq + index * 2,
                    now + timedelta(milliseconds=index),
                    value,
                )
                for index, value in enumerate(losses)
            ],
        )
