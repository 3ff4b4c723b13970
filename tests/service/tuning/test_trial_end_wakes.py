"""A trial's end wakes its tuner at once: the tuner's pass is sent as the transaction that
ended the trial commits, whichever process ends it (the worker's reconciler, the API
stopping a trial in line), and no other job's end sends one.

The sends are caught where they would leave for the broker; the pass they ask for is then
run as the worker's task runs it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.jobs import endings, lifecycle
from service.jobs.lifecycle import Event
from service.kit import enqueue
from service.kit.db import session_scope
from service.kit.enqueue import TUNE_TASK
from service.settings import Settings
from service.tuning import tasks as tuning_tasks
from service.tuning import tuner
from tests.conftest import job_spec
from tests.instances import SleepingInstances
from tests.jobs import job_id, job_state, named, report
from tests.service.tuning.tuning import advance, create, describe
from worker.celery_app import create_celery
from worker.reconciler import Reconciler


@pytest.fixture
def tuner_passes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The tuning job ids of each tuner's pass sent from now on."""
    sent: list[list[str]] = []

    def send(
        _settings: Settings, task: str, ids: Sequence[str], expires: float | None = None
    ) -> None:
        if task == TUNE_TASK:
            sent.append(list(ids))

    monkeypatch.setattr(enqueue, "_send", send)
    return sent


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"stop_grace_seconds": 0.0, "teardown_grace_seconds": 0.5})


def test_a_trial_the_api_stops_in_line_wakes_its_tuner_which_asks_for_the_next(
    api: TestClient, settings: Settings, source_dir: Path, tuner_passes: list[list[str]]
) -> None:
    tuning_id = create(api, source_dir)["id"]
    advance(settings)
    first, _second = (trial["name"] for trial in describe(api)["trials"])
    tuner_passes.clear()  # the one the creation sent

    # Another job's end wakes no tuner.
    plain = api.post("/v1/training-jobs", json=job_spec(source_dir, name="plain-1"))
    assert plain.status_code == 201, plain.text
    assert api.post("/v1/training-jobs/plain-1/stop").json()["status"] == "Stopped"
    assert tuner_passes == []

    # No worker runs: the trial waits in line, and the stop ends it in the request.
    assert api.post(f"/v1/training-jobs/{first}/stop").json()["status"] == "Stopped"
    assert tuner_passes == [[tuning_id]]
    tuner.advance(settings, tuning_id)  # the pass sent, as the worker runs it
    trials = describe(api)["trials"]
    assert [(t["number"], t["status"]) for t in trials] == [
        (1, "Stopped"),
        (2, "InProgress"),
        (3, "InProgress"),
    ]


def test_a_trial_the_worker_ends_wakes_its_tuner_once_the_end_commits(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    tuner_passes: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tuning_id = create(api, source_dir)["id"]
    advance(settings)
    first, _second = (trial["name"] for trial in describe(api)["trials"])
    # Only the worker's process listens now, as where the API runs elsewhere: its tuner's
    # task registered, as `runyard worker` registers it.
    monkeypatch.setattr(endings, "_listeners", {})
    create_celery(settings, more_tasks=[tuning_tasks.register])
    tuner_passes.clear()

    backend = SleepingInstances(settings.jobs_dir)
    reconciler = Reconciler(settings, lambda _name, _settings: backend)
    reconciler.reconcile(job_id(settings, first))  # launched: nothing has ended
    assert job_state(settings, first)["status"] == "InProgress"
    assert tuner_passes == []
    report(settings, first, "algo-1", "Completed", exit_code=0)
    reconciler.reconcile(job_id(settings, first))
    assert job_state(settings, first)["status"] == "Completed"
    assert tuner_passes == [[tuning_id]]
    tuner.advance(settings, tuning_id)
    assert [t["status"] for t in describe(api)["trials"]] == [
        "Completed",
        "InProgress",
        "InProgress",
    ]


def test_an_end_rolled_back_wakes_no_tuner(
    api: TestClient, settings: Settings, source_dir: Path, tuner_passes: list[list[str]]
) -> None:
    create(api, source_dir)
    advance(settings)
    first = describe(api)["trials"][0]["name"]
    tuner_passes.clear()

    def end_then_fail() -> None:
        with session_scope(settings.database_url) as session:
            lifecycle.apply(named(session, first), Event.FAILED, "Training job failed")
            raise RuntimeError("the transaction fails after the end was decided")

    with pytest.raises(RuntimeError):
        end_then_fail()
    assert tuner_passes == []
    assert job_state(settings, first)["status"] == "InProgress"
