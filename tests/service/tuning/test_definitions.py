"""A tuning job of several training job definitions (SageMaker's TrainingJobDefinitions):
each trial runs one definition with that definition's ranges, static hyperparameters and
objective metric; the best trial is the best of all; the form and its rules are checked
naming the field, and nothing is created on refusal."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from service.tuning import search
from service.tuning.schemas import TuningJobCreate
from tests.service.tuning.tuning import (
    advance,
    describe,
    end_job,
    refused,
    report,
    training_jobs,
    tuning_spec,
)

SIX = {"max_number_of_training_jobs": 6, "max_parallel_training_jobs": 6}


def two_definitions(source_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A tuning job of two definitions: "mlp" tunes lr and optimizer on its loss, "tree"
    tunes depth (and a categorical lr of its own) on its error, with other statics."""
    spec = tuning_spec(source_dir, resource_limits=SIX)
    mlp = {
        "definition_name": "mlp",
        "objective": spec.pop("objective"),
        "parameter_ranges": spec.pop("parameter_ranges"),
        "training_job": spec.pop("training_job"),
    }
    tree_job = copy.deepcopy(mlp["training_job"])
    tree_job["hyperparameters"] = {"epochs": 5, "kind": "tree"}
    tree_job["metric_definitions"] = [{"name": "error", "regex": "error=([0-9.]+)"}]
    tree = {
        "definition_name": "tree",
        "objective": {"type": "Minimize", "metric_name": "error"},
        "parameter_ranges": {
            "integer": [{"name": "depth", "min_value": 2, "max_value": 9}],
            "categorical": [{"name": "lr", "values": ["low", "high"]}],
        },
        "training_job": tree_job,
    }
    spec["training_job_definitions"] = [mlp, tree]
    spec.update(overrides)
    return spec


def test_each_trial_runs_one_definition_with_its_own_ranges_statics_and_metric(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    answer = api.post("/v1/tuning-jobs", json=two_definitions(source_dir))
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert (created["objective"], created["objective_type"]) == (None, "Minimize")
    advance(settings)
    trials = describe(api)["trials"]
    assert len(trials) == 6
    # Seed 42's six asks take both definitions.
    assert {t["definition"] for t in trials} == {"mlp", "tree"}
    jobs = {job["name"]: job for job in training_jobs(settings)}
    for trial in trials:
        job = jobs[trial["name"]]
        parameters = trial["parameters"]
        if trial["definition"] == "mlp":
            assert set(parameters) == {"lr", "optimizer"}
            assert 0.0001 <= parameters["lr"] <= 0.1
            assert job["hyperparameters"] == {
                "epochs": 2,
                "_tuning_objective_metric": "loss",
                **parameters,
            }
        else:
            assert set(parameters) == {"depth", "lr"}
            assert 2 <= parameters["depth"] <= 9
            assert parameters["lr"] in ("low", "high")
            assert job["hyperparameters"] == {
                "epochs": 5,
                "kind": "tree",
                "_tuning_objective_metric": "error",
                **parameters,
            }

    # Each trial's objective is its own definition's metric: a tree trial's "loss" line
    # is not its objective, its "error" is.
    mlp_trial = next(t for t in trials if t["definition"] == "mlp")
    tree_trials = [t for t in trials if t["definition"] == "tree"]
    assert len(tree_trials) >= 2  # seed 42's asks
    end_job(settings, mlp_trial["name"], loss=0.5)
    end_job(settings, tree_trials[0]["name"], loss=0.01)  # its "loss", not its objective
    end_job(settings, tree_trials[-1]["name"], loss=0.2, metric="error")
    advance(settings)
    by_name = {t["name"]: t for t in describe(api)["trials"]}
    assert by_name[mlp_trial["name"]]["objective"] == 0.5
    assert by_name[tree_trials[0]["name"]]["objective_status"] == "Failed"
    assert by_name[tree_trials[-1]["name"]]["objective"] == 0.2
    described = describe(api)
    assert (described["best_trial"]["name"], described["best_trial"]["definition"]) == (
        tree_trials[-1]["name"],
        "tree",
    )

    for trial in described["trials"]:
        if trial["status"] == "InProgress":
            end_job(settings, trial["name"], loss=0.9)
    advance(settings)
    assert describe(api)["status"] == "Completed"


def test_the_same_seed_asks_the_same_definitions_and_values_and_bayesian_learns_each(
    source_dir: Path,
) -> None:
    spec = TuningJobCreate.model_validate(two_definitions(source_dir, strategy="Bayesian"))
    earlier: list[search.Earlier] = []
    for _ in range(14):
        asked = search.ask(spec, 7, earlier)
        again = search.ask(spec, 7, earlier)
        assert (asked.definition, asked.parameters) == (again.definition, again.parameters)
        # The "tree" trials do well; TPE's model of the pick learns it.
        objective = 0.1 if asked.definition == "tree" else 0.9
        earlier.append(
            search.Earlier(
                asked.parameters, "complete", objective, asked.notes, definition=asked.definition
            )
        )
    later = [e.definition for e in earlier[10:]]
    assert {e.definition for e in earlier} == {"mlp", "tree"}
    assert later.count("tree") >= 3


def test_the_median_rule_compares_a_trial_with_its_own_definitions_trials(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    twelve = {"max_number_of_training_jobs": 12, "max_parallel_training_jobs": 12}
    spec = two_definitions(source_dir, early_stopping_type="Auto", resource_limits=twelve)
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 201, answer.text
    advance(settings)
    trials = describe(api)["trials"]
    mlps = [t["name"] for t in trials if t["definition"] == "mlp"]
    trees = [t["name"] for t in trials if t["definition"] == "tree"]
    if len(mlps) < 4 or len(trees) < 4:
        pytest.fail(f"seed 42 should ask each definition four times: {mlps}, {trees}")
    # Three completed trials of each: mlp's loss near 0.1, tree's error (another scale)
    # near 5.0. Of all six the median would be 2.55.
    for mlp, tree in zip(mlps[:3], trees[:3], strict=True):
        report(settings, mlp, [0.1, 0.1, 0.1])
        end_job(settings, mlp)
        report(settings, tree, [5.0, 5.0, 5.0], metric="error")
        end_job(settings, tree)
    advance(settings)
    # Against its own definition's median, the tree trial at 4.0 is better and runs on,
    # and the mlp trial at 0.5 is worse and is stopped.
    report(settings, trees[3], [4.0, 4.0, 4.0], metric="error")
    report(settings, mlps[3], [0.5, 0.5, 0.5])
    advance(settings)
    advance(settings)
    by_name = {t["name"]: t for t in describe(api)["trials"]}
    assert by_name[trees[3]]["status"] == "InProgress"
    assert by_name[mlps[3]]["status"] == "Stopped"
    assert "median stopping rule" in by_name[mlps[3]]["failure_reason"]


@pytest.mark.parametrize(
    ("change", "loc", "message"),
    [
        (
            lambda s: s.update(training_job=s["training_job_definitions"][0]["training_job"]),
            ["training_job"],
            "not with them",
        ),
        (
            lambda s: s["training_job_definitions"][1].update(definition_name="mlp"),
            ["training_job_definitions", 1, "definition_name"],
            "names another definition",
        ),
        (
            lambda s: s["training_job_definitions"][1]["objective"].update(type="Maximize"),
            ["training_job_definitions", 1, "objective", "type"],
            "must be Minimize, as the first definition's",
        ),
        (
            lambda s: s["training_job_definitions"][1]["objective"].update(metric_name="loss"),
            ["training_job_definitions", 1, "objective", "metric_name"],
            "'loss' is not one of the training job's metric_definitions ('error')",
        ),
        (
            lambda s: s["training_job_definitions"][1]["training_job"]["hyperparameters"].update(
                depth=3
            ),
            ["training_job_definitions", 1, "training_job", "hyperparameters", "depth"],
            "is tuned",
        ),
        (
            lambda s: s.update(strategy="Grid"),
            ["strategy"],
            "the Grid strategy tunes one training job",
        ),
        (
            lambda s: s.update(
                warm_start_config={
                    "warm_start_type": "TransferLearning",
                    "parent_tuning_jobs": ["old"],
                }
            ),
            ["warm_start_config"],
            "not with training_job_definitions",
        ),
        (
            lambda s: s["training_job_definitions"][0].update(definition_name="no_underscore"),
            ["training_job_definitions", 0, "definition_name"],
            "should match pattern",
        ),
    ],
)
def test_a_spec_of_several_definitions_that_breaks_a_rule_is_refused_naming_the_field(
    api: TestClient, source_dir: Path, change: Any, loc: list[Any], message: str
) -> None:
    spec = two_definitions(source_dir)
    change(spec)
    refused(api, spec, loc, message)


def test_neither_form_is_refused_naming_what_is_missing(api: TestClient, source_dir: Path) -> None:
    spec = tuning_spec(source_dir)
    del spec["training_job"]
    refused(api, spec, ["training_job"], "or give training_job_definitions instead")


def test_a_definitions_training_job_the_server_refuses_is_named_by_its_place(
    api: TestClient, source_dir: Path
) -> None:
    spec = two_definitions(source_dir)
    spec["training_job_definitions"][1]["training_job"]["instance_type"] = "ml.nope.large"
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"][:5] == [
        "body",
        "training_job_definitions",
        1,
        "training_job",
        "instance_type",
    ]
    assert api.get("/v1/tuning-jobs").json()["items"] == []


def test_a_warm_start_from_a_tuning_job_of_several_definitions_is_refused_naming_it(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    parent = two_definitions(source_dir, name="parent-1")
    assert api.post("/v1/tuning-jobs", json=parent).status_code == 201
    advance(settings, "parent-1")
    for trial in describe(api, "parent-1")["trials"]:
        metric = "loss" if trial["definition"] == "mlp" else "error"
        end_job(settings, trial["name"], loss=0.5, metric=metric)
    advance(settings, "parent-1")
    assert describe(api, "parent-1")["status"] == "Completed"

    child = tuning_spec(
        source_dir,
        name="tune-2",
        warm_start_config={
            "warm_start_type": "TransferLearning",
            "parent_tuning_jobs": ["parent-1"],
        },
    )
    answer = api.post("/v1/tuning-jobs", json=child)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "warm_start_config", "parent_tuning_jobs", 0]
    assert "tuned several training job definitions" in error["msg"]
    assert [t["name"] for t in api.get("/v1/tuning-jobs").json()["items"]] == ["parent-1"]
