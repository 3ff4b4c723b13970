"""Submitting, describing, listing and stopping jobs through the HTTP API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from service.jobs.models import TrainingJob
from service.jobs.record import JobRecord, record_of
from service.jobs.states import STOPPED_BY_USER
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from tests.conftest import job_spec
from tests.jobs import SERVER_ADMIN


def _set_status(settings: Settings, name: str, status: str) -> None:
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == name)).one()
        job.status = status
        job.ended_at = utcnow()


def test_create_returns_the_stored_job(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    spec = job_spec(
        source_dir,
        instance_count=2,
        hyperparameters={"epochs": 3, "lr": 0.1, "name": "x"},
        distribution={"torch_distributed": {"enabled": True}},
        environment={"MY_FLAG": "1"},
        inputs={"train": str(source_dir.as_uri())},
    )
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "InProgress"
    assert job["secondary_status"] == "Starting"
    assert [t["secondary_status"] for t in job["transitions"]] == ["Starting"]
    assert job["backend"] == "local"
    assert job["spec"]["output_path"] == settings.artifact_root
    assert job["spec"]["inputs"]["train"]["input_mode"] == "File"
    assert job["spec"]["hyperparameters"] == {"epochs": 3, "lr": 0.1, "name": "x"}
    assert api.get("/v1/training-jobs/job-1").json()["id"] == job["id"]


def test_a_job_stored_under_older_rules_is_shown_as_it_was_taken(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    """A reply shows the record kept for the job (read as stored, ``JobRecord.load``),
    not its stored form validated again as a new spec: a metric named before
    ``instance/`` names were reserved does not make the job unreadable."""
    spec = job_spec(source_dir, metric_definitions=[{"name": "loss", "regex": "loss=(\\S+)"}])
    assert api.post("/v1/training-jobs", json=spec).status_code == 201
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob).where(TrainingJob.name == "job-1")).one()
        older = {**job.spec, "metric_definitions": [{"name": "instance/loss", "regex": "l=(\\S+)"}]}
        session.execute(update(TrainingJob).where(TrainingJob.id == job.id).values(spec=older))
    shown = api.get("/v1/training-jobs/job-1")
    assert shown.status_code == 200, shown.text
    assert shown.json()["spec"]["metric_definitions"][0]["name"] == "instance/loss"
    stopped = api.post("/v1/training-jobs/job-1/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["spec"]["metric_definitions"][0]["name"] == "instance/loss"


def test_name_is_generated_from_base_job_name_or_entry_point(
    api: TestClient, source_dir: Path
) -> None:
    from_base = api.post(
        "/v1/training-jobs", json=job_spec(source_dir, name=None, base_job_name="exp")
    ).json()
    assert re.fullmatch(r"exp-\d{4}(-\d{2}){5}-\d{3}", from_base["name"])
    spec = {k: v for k, v in job_spec(source_dir).items() if k != "name"}
    from_entry = api.post("/v1/training-jobs", json=spec).json()
    assert from_entry["name"].startswith("train-")


def test_unknown_job_is_404(api: TestClient) -> None:
    assert api.get("/v1/training-jobs/nope").status_code == 404
    assert api.post("/v1/training-jobs/nope/stop").status_code == 404
    assert api.get("/v1/training-jobs/nope/logs").status_code == 404


def test_list_is_newest_first_with_filters_and_cursor(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    names = ["a-1", "a-2", "b-1", "a-3", "b-2"]
    for name in names:
        assert (
            api.post("/v1/training-jobs", json=job_spec(source_dir, name=name)).status_code == 201
        )
    _set_status(settings, "a-2", "Completed")

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/training-jobs", params=params).json()
        seen += [item["name"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(names))

    prefixed = api.get("/v1/training-jobs", params={"name_prefix": "a-"}).json()["items"]
    assert [item["name"] for item in prefixed] == ["a-3", "a-2", "a-1"]
    completed = api.get("/v1/training-jobs", params={"status": "Completed"}).json()["items"]
    assert [item["name"] for item in completed] == ["a-2"]
    assert api.get("/v1/training-jobs", params={"status": "Bogus"}).status_code == 422
    assert api.get("/v1/training-jobs", params={"cursor": "garbage"}).status_code == 422


def test_name_prefix_is_literal(api: TestClient, source_dir: Path) -> None:
    for name in ("ab", "a-b"):
        api.post("/v1/training-jobs", json=job_spec(source_dir, name=name))
    # SQL wildcards in a prefix are plain characters.
    assert api.get("/v1/training-jobs", params={"name_prefix": "a_"}).json()["items"] == []
    assert api.get("/v1/training-jobs", params={"name_prefix": "a%"}).json()["items"] == []


def test_stop_moves_to_stopping_once(api: TestClient, settings: Settings, source_dir: Path) -> None:
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    with session_scope(settings.database_url) as session:
        session.execute(update(TrainingJob).values(admitted_at=utcnow()))  # it has instances
    first = api.post("/v1/training-jobs/job-1/stop")
    assert first.status_code == 200
    assert (first.json()["status"], first.json()["secondary_status"]) == ("Stopping", "Stopping")
    again = api.post("/v1/training-jobs/job-1/stop").json()
    assert [t["secondary_status"] for t in again["transitions"]] == ["Starting", "Stopping"]


def test_a_job_that_never_launched_is_stopped_at_once(api: TestClient, source_dir: Path) -> None:
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    stopped = api.post("/v1/training-jobs/job-1/stop").json()
    assert (stopped["status"], stopped["secondary_status"]) == ("Stopped", "Stopped")
    assert [t["secondary_status"] for t in stopped["transitions"]] == [
        "Starting",
        "Stopping",
        "Stopped",
    ]
    assert stopped["ended_at"] is not None
    lines = api.get("/v1/training-jobs/job-1/logs").json()["events"]
    assert [line["message"] for line in lines] == [STOPPED_BY_USER]
    assert api.post("/v1/training-jobs/job-1/stop").status_code == 409


@pytest.mark.parametrize("status", ["Completed", "Failed", "Stopped"])
def test_stopping_an_ended_job_is_a_conflict(
    api: TestClient, settings: Settings, source_dir: Path, status: str
) -> None:
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    _set_status(settings, "job-1", status)
    response = api.post("/v1/training-jobs/job-1/stop")
    assert response.status_code == 409
    assert status in response.json()["detail"]


def test_dry_run_shows_the_plan_and_creates_nothing(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    spec = job_spec(source_dir, instance_count=2, hyperparameters={"epochs": 2})
    response = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["name"] == "job-1"
    instances = result["plan"]["instances"]
    assert [i["host"] for i in instances] == ["algo-1", "algo-2"]
    assert instances[0]["env"]["RUNYARD_JOB_TOKEN"] == "<redacted>"
    assert '"epochs": "2"' in instances[1]["files"]["input/config/hyperparameters.json"]
    assert "algo-2" in result["rendered"]
    assert api.get("/v1/training-jobs").json()["items"] == []
    assert not settings.jobs_dir.exists() or not any(settings.jobs_dir.iterdir())


def test_dry_run_masks_the_servers_credentials_and_the_jobs_own(
    api: TestClient, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASERVERKEYID00000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "server-secret-0123456789")
    environment = {"WANDB_API_KEY": "job-secret-abcdef", "DB_PASSWORD": "pw-1", "MY_FLAG": "on"}
    spec = job_spec(source_dir, environment=environment)
    response = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=spec)
    assert response.status_code == 200, response.text
    shown = response.text
    for secret in ("AKIASERVERKEYID00000", "server-secret-0123456789", "job-secret-abcdef", "pw-1"):
        assert secret not in shown
    # The server's keys are not an instance's at all: the service gives the job its own.
    env = response.json()["plan"]["instances"][0]["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "AWS_ACCESS_KEY_ID" not in env
    runyard = json.loads(
        response.json()["plan"]["instances"][0]["files"]["input/config/runyard.json"]
    )
    assert runyard["aws_credentials"] is True
    assert runyard["spec"]["environment"] == {
        "DB_PASSWORD": "<redacted>",
        "MY_FLAG": "on",
        "WANDB_API_KEY": "<redacted>",
    }


def test_dry_run_validates_like_a_submission(api: TestClient, source_dir: Path) -> None:
    response = api.post(
        "/v1/training-jobs", params={"dry_run": "true"}, json=job_spec(source_dir, instance_count=0)
    )
    assert response.status_code == 422
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    taken = api.post("/v1/training-jobs", params={"dry_run": "true"}, json=job_spec(source_dir))
    assert taken.status_code == 409


def test_stop_that_races_a_reconciler_write_rereads_and_stops(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    from service.jobs import lookup
    from service.jobs.states import Secondary, Status
    from service.kit.db import get_sessionmaker
    from service.training import service

    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite takes the write lock at BEGIN, so this interleaving cannot happen")
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    session = get_sessionmaker(settings.database_url)()
    try:
        lookup.get(session, "job-1", SERVER_ADMIN)  # the API's read ...
        with session_scope(settings.database_url) as other:  # ... then the reconciler writes
            job = other.scalars(select(TrainingJob)).one()
            job.admitted_at = utcnow()
            job.secondary_status = Secondary.LAUNCHING_INSTANCES
        stopped = service.stop(session, settings, "job-1", SERVER_ADMIN)
        session.commit()
        assert stopped.status == Status.STOPPING
    finally:
        session.close()
    transitions = api.get("/v1/training-jobs/job-1").json()["transitions"]
    assert [t["secondary_status"] for t in transitions] == ["Starting", "Stopping"]


def test_a_reconciler_write_waits_for_a_stop_in_progress_and_then_yields(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    import threading

    from sqlalchemy import event
    from sqlalchemy.orm.exc import StaleDataError

    from service.kit.db import get_sessionmaker
    from service.training import service

    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite takes the write lock at BEGIN, so this interleaving cannot happen")
    api.post("/v1/training-jobs", json=job_spec(source_dir))
    make_session = get_sessionmaker(settings.database_url)
    outcome: list[BaseException] = []
    admitting = make_session()
    job = admitting.scalars(select(TrainingJob)).one()  # the reconciler's read ...

    def admit() -> None:  # ... and its write, made while the stop is under way
        try:
            job.admitted_at = utcnow()
            admitting.commit()
        except StaleDataError as exc:
            outcome.append(exc)
            admitting.rollback()

    stopping = make_session()
    writer = threading.Thread(target=admit)
    waited: list[bool] = []

    @event.listens_for(stopping, "before_flush")
    def write_meanwhile(*_args: object) -> None:
        # Between the stop's read and its first write: the reconciler's write waits.
        if not waited:
            writer.start()
            writer.join(0.5)
            waited.append(writer.is_alive())

    try:
        service.stop(stopping, settings, "job-1", SERVER_ADMIN)
        stopping.commit()
        writer.join(10)
    finally:
        stopping.close()
        admitting.close()
    assert waited == [True], "the reconciler's write should wait for the stop"
    # The stop stands; the reconciler's write found the job changed (it reads it again).
    assert len(outcome) == 1
    job_now = api.get("/v1/training-jobs/job-1").json()
    assert (job_now["status"], job_now["secondary_status"]) == ("Stopped", "Stopped")


def test_simultaneous_submissions_of_one_name_conflict(
    settings: Settings, source_dir: Path
) -> None:
    import threading

    from service.jobs.schemas import JobCreate
    from service.kit.db import get_sessionmaker
    from service.kit.errors import Conflict
    from service.training import service

    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite takes the write lock at BEGIN, so this interleaving cannot happen")
    spec = JobCreate.model_validate(job_spec(source_dir))
    make_session = get_sessionmaker(settings.database_url)
    first = make_session()
    outcome: list[BaseException] = []

    def second_submission() -> None:
        session = make_session()
        try:
            # Blocks on the name until `first` commits.
            service.submit(session, settings, spec, "default")
        except Conflict as exc:
            outcome.append(exc)
        finally:
            session.rollback()
            session.close()

    try:
        service.submit(first, settings, spec, "default")
        racer = threading.Thread(target=second_submission)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the second insert should wait for the first transaction"
        first.commit()
        racer.join(10)
    finally:
        first.close()
    assert len(outcome) == 1
    assert "job-1" in str(outcome[0])


def test_mpi_options_that_are_allowed_pass(api: TestClient, source_dir: Path) -> None:
    spec = job_spec(
        source_dir,
        instance_count=2,
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 2,
                "custom_mpi_options": "--mca btl_tcp_if_exclude docker0 -x NCCL_DEBUG=INFO",
            }
        },
    )
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text


def test_model_parallel_parameters_reach_the_script_as_mp_parameters(
    api: TestClient, source_dir: Path
) -> None:
    parameters = {"microbatches": 4, "ddp": True, "sharded_data_parallel_degree": 2}
    distribution = {
        "mpi": {"enabled": True, "processes_per_host": 2},
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
    }
    spec = job_spec(source_dir, instance_count=2, distribution=distribution)
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["hyperparameters"]["mp_parameters"] == parameters

    # As SageMaker's SDK sends them itself: kept as sent.
    sent = {"mp_parameters": json.dumps(parameters), "epochs": 2}
    spec = job_spec(
        source_dir, name="job-2", instance_count=2, distribution=distribution, hyperparameters=sent
    )
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["hyperparameters"] == sent


def test_a_job_created_is_not_parsed_back_from_its_stored_record(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its record is kept as it was built, and is what a parse of the stored form gives."""
    spec = job_spec(
        source_dir,
        distribution={"torch_distributed": {"enabled": True}},
        environment={"MY_FLAG": "1"},
        hyperparameters={"epochs": 3},
    )
    parses: list[object] = []
    load = JobRecord.load.__func__  # type: ignore[attr-defined]

    def counted(cls: type[JobRecord], stored: dict[str, Any]) -> JobRecord:
        parses.append(stored)
        return load(cls, stored)  # type: ignore[no-any-return]

    monkeypatch.setattr(JobRecord, "load", classmethod(counted))
    response = api.post("/v1/training-jobs", json=spec)
    assert response.status_code == 201, response.text
    assert parses == []
    with session_scope(settings.database_url) as session:
        stored = session.get(TrainingJob, response.json()["id"]).spec  # type: ignore[union-attr]
    kept = record_of(response.json()["id"], stored)
    assert parses == []
    assert kept == load(JobRecord, stored)
