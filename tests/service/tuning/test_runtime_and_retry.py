"""A tuning job's own maximum runtime, judged by its stored creation time, and its trials'
retry strategy, which restarts each trial's own training job (as SageMaker's does)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from service.jobs.models import TrainingJob
from service.kit.db import session_scope
from service.settings import Settings
from service.tuning.models import TuningJob
from tests.service.tuning.tuning import (
    advance,
    create,
    describe,
    end_job,
    training_jobs,
    tuning_spec,
)

LIMITS = {"max_number_of_training_jobs": 4, "max_parallel_training_jobs": 2}
RUNTIME_REASON = (
    "The tuning job reached its maximum runtime (600 seconds): no more training jobs were "
    "started and those running were stopped"
)


def age(settings: Settings, seconds: float, name: str = "tune-1") -> None:
    """Move the tuning job's stored creation time back, as if it had run that long."""
    with session_scope(settings.database_url) as session:
        tuning = session.scalars(select(TuningJob).where(TuningJob.name == name)).one()
        tuning.created_at -= timedelta(seconds=seconds)


def stop_messages(settings: Settings, name: str) -> list[str]:
    """What the training job's transitions said while it stopped."""
    with session_scope(settings.database_url, readonly=True) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        return [t.message for t in job.transitions if t.status == "Stopping"]


def job_of(settings: Settings, name: str) -> TrainingJob:
    with session_scope(settings.database_url, readonly=True) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        session.expunge(job)
        return job


def test_a_tuning_job_within_its_runtime_goes_on(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, resource_limits={**LIMITS, "max_runtime_in_seconds": 600})
    advance(settings)
    age(settings, 540)  # a minute short, whatever this test takes itself
    first = describe(api)["trials"][0]["name"]
    end_job(settings, first, loss=0.5)
    advance(settings)
    described = describe(api)
    assert described["status"] == "InProgress"
    assert described["failure_reason"] is None
    assert [t["status"] for t in described["trials"]] == ["Completed", "InProgress", "InProgress"]


def test_a_tuning_job_past_its_runtime_stops_its_trials_asks_no_more_and_ends_stopped(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    created = create(api, source_dir, resource_limits={**LIMITS, "max_runtime_in_seconds": 600})
    assert created["spec"]["resource_limits"]["max_runtime_in_seconds"] == 600
    advance(settings)
    first, second = (t["name"] for t in describe(api)["trials"])
    end_job(settings, first, loss=0.5)
    age(settings, 600)

    advance(settings)  # the second trial's job never launched: it is Stopped at once
    described = describe(api)
    assert len(described["trials"]) == 2  # the ended first trial's place is not filled
    assert {job["name"]: job["status"] for job in training_jobs(settings)} == {
        first: "Completed",
        second: "Stopped",
    }
    assert stop_messages(settings, second) == [
        "Stopping: its tuning job reached its maximum runtime"
    ]

    advance(settings)
    described = describe(api)
    assert described["status"] == "Stopped"
    assert described["failure_reason"] == RUNTIME_REASON
    assert described["ended_at"] is not None
    assert described["training_job_counts"] == {
        "completed": 1,
        "in_progress": 0,
        "failed": 0,
        "stopped": 1,
    }
    assert described["best_trial"]["name"] == first
    advance(settings)  # an ended tuning job is left as it is
    assert describe(api)["status"] == "Stopped"
    assert len(training_jobs(settings)) == 2


def test_a_tuning_job_whose_trials_all_ended_completes_though_its_runtime_is_past(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    limits = {"max_number_of_training_jobs": 1, "max_parallel_training_jobs": 1}
    create(api, source_dir, resource_limits={**limits, "max_runtime_in_seconds": 120})
    advance(settings)
    (trial,) = describe(api)["trials"]
    end_job(settings, trial["name"], loss=0.5)
    age(settings, 3600)
    advance(settings)
    described = describe(api)
    assert (described["status"], described["failure_reason"]) == ("Completed", None)


def test_a_person_stopping_a_tuning_job_with_a_runtime_gives_no_runtime_reason(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, resource_limits={**LIMITS, "max_runtime_in_seconds": 600})
    advance(settings)
    assert api.post("/v1/tuning-jobs/tune-1/stop").status_code == 200
    advance(settings)
    advance(settings)
    described = describe(api)
    assert (described["status"], described["failure_reason"]) == ("Stopped", None)
    name = described["trials"][0]["name"]
    assert stop_messages(settings, name) == [
        "Stopping: its tuning job is stopping at the user's request"
    ]


def retry(settings: Settings, name: str) -> None:
    """The trial's training job failed and restarts, as the reconciler restarts a job its
    retry strategy allows: the same job, in progress again, one restart more."""
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        job.restarts += 1
        job.status, job.secondary_status = "InProgress", "Starting"


def test_each_trials_training_job_gets_the_retry_strategy_and_a_retried_trial_counts_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    training = {**tuning_spec(source_dir)["training_job"], "max_retry_attempts": 3}
    limits = {"max_number_of_training_jobs": 2, "max_parallel_training_jobs": 1}
    created = create(api, source_dir, training_job=training, resource_limits=limits)
    assert created["spec"]["training_job"]["max_retry_attempts"] == 3
    advance(settings)
    (trial,) = describe(api)["trials"]
    assert job_of(settings, trial["name"]).record.max_retry_attempts == 3

    retry(settings, trial["name"])
    advance(settings)
    described = describe(api)
    # Restarted, not replaced: still one trial, running, and no other job asked for.
    assert [t["status"] for t in described["trials"]] == ["InProgress"]
    assert len(training_jobs(settings)) == 1

    end_job(settings, trial["name"], loss=0.5)
    advance(settings)
    described = describe(api)
    assert [t["status"] for t in described["trials"]] == ["Completed", "InProgress"]
    assert described["training_job_counts"] == {
        "completed": 1,
        "in_progress": 1,
        "failed": 0,
        "stopped": 0,
    }
    assert described["objective_counts"] == {"succeeded": 1, "pending": 1, "failed": 0}


def test_a_trial_counts_as_failed_once_its_jobs_retries_are_spent(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    training = {**tuning_spec(source_dir)["training_job"], "max_retry_attempts": 1}
    limits = {"max_number_of_training_jobs": 1, "max_parallel_training_jobs": 1}
    create(api, source_dir, training_job=training, resource_limits=limits)
    advance(settings)
    (trial,) = describe(api)["trials"]
    retry(settings, trial["name"])
    advance(settings)
    assert describe(api)["training_job_counts"]["failed"] == 0
    end_job(settings, trial["name"], status="Failed")
    advance(settings)
    described = describe(api)
    assert described["status"] == "Failed"
    assert described["training_job_counts"]["failed"] == 1
    assert len(described["trials"]) == 1
