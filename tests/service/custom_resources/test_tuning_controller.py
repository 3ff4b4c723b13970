"""The HyperparameterTuningJob controller against a Kubernetes API server (kmock): a
resource applied becomes a tuning job whose trials run as training jobs, its status and
Events follow the tuning job to its best trial, a deletion stops the tuning job and holds
the resource until it has ended, a restarted controller creates nothing twice, and what
the server refuses is said on the resource with the field named as the resource spells it.

The tuner's passes run in the test, and the trials' training jobs end as the reconciler
would end them, each with its final loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.custom_resources import names
from service.custom_resources.tuning_controller import TuningController
from service.settings import Settings
from tests.kube import KubeServer
from tests.service.custom_resources.support import Cluster
from tests.service.tuning.tuning import advance, create, describe, end_job

HPT = names.TUNING_JOB


@pytest.fixture
def cluster(kube_server: KubeServer) -> Cluster:
    return Cluster(kube_server)


@pytest.fixture
def settings(settings: Settings, cluster: Cluster) -> Settings:
    return cluster.settings(settings)


def resource_spec(source_dir: Path, **changes: Any) -> dict[str, Any]:
    """A tuning job as its author writes the resource: the tuning API's fields in
    camelCase, inside the training job too (the hyperparameters' names as they are)."""
    spec: dict[str, Any] = {
        "strategy": "Random",
        "objective": {"type": "Minimize", "metricName": "loss"},
        "resourceLimits": {"maxNumberOfTrainingJobs": 2, "maxParallelTrainingJobs": 2},
        "parameterRanges": {
            "continuous": [
                {"name": "lr", "minValue": 0.0001, "maxValue": 0.1, "scalingType": "Logarithmic"}
            ],
            "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
        },
        "randomSeed": 42,
        "trainingJob": {
            "entryPoint": "train.py",
            "sourceUri": source_dir.as_uri(),
            "instanceType": "local",
            "hyperparameters": {"epochs": 2},
            "metricDefinitions": [{"name": "loss", "regex": "loss=([0-9.]+)"}],
        },
    }
    spec.update(changes)
    return spec


def _conditions(resource: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in resource["status"]["conditions"]}


def test_an_applied_resource_runs_its_trials_and_shows_the_best(
    api: TestClient, settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    controller = TuningController(settings, cluster.api_client)
    cluster.apply_spec("lr-search", resource_spec(source_dir), HPT)
    controller.sync()
    resource = cluster.get("lr-search", HPT)
    assert resource["metadata"]["finalizers"] == [names.FINALIZER]
    status = resource["status"]
    assert (status["status"], status["project"], status["maxTrials"]) == (
        "InProgress",
        "default",
        2,
    )
    assert status["objective"] == "Minimize loss"
    assert _conditions(resource)["Accepted"] == "True"
    assert _conditions(resource)["Running"] == "True"

    advance(settings, "lr-search")
    trials = describe(api, "lr-search")["trials"]
    assert len(trials) == 2
    # Each trial's training job carries the resource's uid, as the tuning job does.
    uid = resource["metadata"]["uid"]
    for trial in trials:
        tags = api.get(f"/v1/training-jobs/{trial['name']}").json()["spec"]["tags"]
        assert {"key": names.RESOURCE_TAG, "value": uid} in tags
    for trial, loss in zip(trials, (0.4, 0.2), strict=True):
        end_job(settings, trial["name"], loss=loss)
    advance(settings, "lr-search")
    controller.sync()

    resource = cluster.get("lr-search", HPT)
    status = resource["status"]
    assert (status["status"], status["trialsStarted"], status["trialsEnded"]) == ("Completed", 2, 2)
    assert status["trainingJobs"] == {"completed": 2, "inProgress": 0, "failed": 0, "stopped": 0}
    assert status["bestTrial"] == {"number": 2, "name": trials[1]["name"], "objective": 0.2}
    assert _conditions(resource)["Completed"] == "True"
    assert _conditions(resource)["Running"] == "False"
    events = cluster.events("lr-search")
    assert [reason for _kind, reason, _message in events] == ["InProgress", "Completed"]
    assert events[-1][2] == f"best trial {trials[1]['name']} (loss 0.2) of 2"
    # Passes with nothing new post nothing again, and create no second tuning job.
    TuningController(settings, cluster.api_client).sync()
    assert len(cluster.events("lr-search")) == 2
    assert [item["name"] for item in api.get("/v1/tuning-jobs").json()["items"]] == ["lr-search"]


def test_deleting_a_running_resource_stops_its_tuning_job_then_lets_it_go(
    api: TestClient, settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    controller = TuningController(settings, cluster.api_client)
    cluster.apply_spec("lr-search", resource_spec(source_dir), HPT)
    controller.sync()
    advance(settings, "lr-search")

    cluster.delete("lr-search", HPT)
    controller.sync()
    # Held by the finalizer while the tuning job stops its trials.
    assert cluster.get("lr-search", HPT)["metadata"]["deletionTimestamp"]
    assert describe(api, "lr-search")["status"] == "Stopping"
    advance(settings, "lr-search")  # the tuner stops the running trials
    for trial in describe(api, "lr-search")["trials"]:
        job = api.get(f"/v1/training-jobs/{trial['name']}").json()
        # Stopped at once where its instances had not been launched yet (no worker runs).
        assert job["status"] in ("Stopping", "Stopped")
        if job["status"] == "Stopping":
            end_job(settings, trial["name"], "Stopped")
    controller.sync()
    assert cluster.exists("lr-search", HPT)  # its trials have not been taken in yet

    advance(settings, "lr-search")
    assert describe(api, "lr-search")["status"] == "Stopped"
    controller.sync()
    assert not cluster.exists("lr-search", HPT)


def test_a_spec_the_server_refuses_is_said_on_the_resource_with_the_field_named(
    api: TestClient, settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    spec = resource_spec(source_dir, objective={"type": "Minimize", "metricName": "acc"})
    cluster.apply_spec("lr-search", spec, HPT)
    TuningController(settings, cluster.api_client).sync()
    resource = cluster.get("lr-search", HPT)
    (accepted,) = [c for c in resource["status"]["conditions"] if c["type"] == "Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"].startswith(
        "spec.objective.metricName: 'acc' is not one of the training job's metric_definitions"
    )
    (event,) = cluster.events("lr-search")
    assert event[:2] == ("Warning", "Invalid")
    assert api.get("/v1/tuning-jobs").json()["items"] == []


def test_a_tuning_job_of_that_name_from_elsewhere_is_not_taken_over(
    api: TestClient, settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    create(api, source_dir, name="lr-search")
    cluster.apply_spec("lr-search", resource_spec(source_dir), HPT)
    TuningController(settings, cluster.api_client).sync()
    resource = cluster.get("lr-search", HPT)
    (accepted,) = [c for c in resource["status"]["conditions"] if c["type"] == "Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "NameTaken")
    # Deleting the resource leaves the other tuning job alone.
    cluster.delete("lr-search", HPT)
    TuningController(settings, cluster.api_client).sync()
    assert not cluster.exists("lr-search", HPT)
    assert describe(api, "lr-search")["status"] == "InProgress"


def test_a_resource_of_several_definitions_shows_each_ones_metric_and_the_best(
    api: TestClient, settings: Settings, cluster: Cluster, source_dir: Path
) -> None:
    one = resource_spec(source_dir)
    definitions = [
        {
            "definitionName": name,
            "objective": {"type": "Minimize", "metricName": metric},
            "parameterRanges": one["parameterRanges"],
            "trainingJob": {
                **one["trainingJob"],
                "metricDefinitions": [{"name": metric, "regex": "loss=([0-9.]+)"}],
            },
        }
        for name, metric in (("small", "loss"), ("large", "error"))
    ]
    spec = {
        key: value
        for key, value in one.items()
        if key not in ("objective", "parameterRanges", "trainingJob")
    }
    spec["trainingJobDefinitions"] = definitions
    controller = TuningController(settings, cluster.api_client)
    cluster.apply_spec("two-defs", spec, HPT)
    controller.sync()
    resource = cluster.get("two-defs", HPT)
    assert _conditions(resource)["Accepted"] == "True", resource["status"]
    assert resource["status"]["objective"] == "Minimize loss (small), error (large)"

    advance(settings, "two-defs")
    trials = describe(api, "two-defs")["trials"]
    for trial in trials:
        metric = "loss" if trial["definition"] == "small" else "error"
        end_job(settings, trial["name"], loss=0.3 if trial["number"] == 1 else 0.6, metric=metric)
    advance(settings, "two-defs")
    controller.sync()
    best = trials[0]
    metric = "loss" if best["definition"] == "small" else "error"
    assert cluster.events("two-defs")[-1][2] == f"best trial {best['name']} ({metric} 0.3) of 2"
