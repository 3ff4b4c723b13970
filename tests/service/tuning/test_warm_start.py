"""Warm start over REST and the tuner's passes: the parents' trials lead the search, the
overall best trial is the best of a tuning job and its parents, and a parent that breaks
one of SageMaker's rules is refused naming it, creating nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.tuning.tuning import advance, create, describe, end_job, tuning_spec

# The parent's trials' losses, in trial order: its best is trial 7.
PARENT_LOSSES = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.1, 0.3, 0.35, 0.45]


def ended_parent(api: TestClient, settings: Settings, source_dir: Path) -> list[dict[str, Any]]:
    """``parent-1``, a Bayesian tuning job of 10 trials, all ended with PARENT_LOSSES."""
    create(
        api,
        source_dir,
        name="parent-1",
        strategy="Bayesian",
        resource_limits={"max_number_of_training_jobs": 10, "max_parallel_training_jobs": 10},
        training_job=_training_job(source_dir),
    )
    advance(settings, "parent-1")
    trials: list[dict[str, Any]] = describe(api, "parent-1")["trials"]
    assert len(trials) == 10
    for trial, loss in zip(trials, PARENT_LOSSES, strict=True):
        end_job(settings, trial["name"], loss=loss)
    advance(settings, "parent-1")
    assert describe(api, "parent-1")["status"] == "Completed"
    return trials


def _training_job(source_dir: Path, channel: Path | None = None) -> dict[str, Any]:
    training: dict[str, Any] = tuning_spec(source_dir)["training_job"]
    training["inputs"] = {"train": {"uri": (channel or source_dir).as_uri()}}
    return training


def warm(
    source_dir: Path, kind: str = "IdenticalDataAndAlgorithm", **overrides: Any
) -> dict[str, Any]:
    spec = tuning_spec(
        source_dir,
        name="tune-2",
        strategy="Bayesian",
        resource_limits={"max_number_of_training_jobs": 2, "max_parallel_training_jobs": 1},
        training_job=_training_job(source_dir),
        warm_start_config={"warm_start_type": kind, "parent_tuning_jobs": ["parent-1"]},
    )
    spec.update(overrides)
    return spec


def test_a_warm_start_asks_after_its_parents_trials_and_names_the_overall_best(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    parent_trials = ended_parent(api, settings, source_dir)
    answer = api.post("/v1/tuning-jobs", json=warm(source_dir))
    assert answer.status_code == 201, answer.text
    # The same tuning job without the warm start, for its first ask.
    cold = warm(source_dir, name="tune-3")
    del cold["warm_start_config"]
    create(api, source_dir, **cold)

    # Before a trial of its own, the overall best is the parent's.
    described = describe(api, "tune-2")
    assert described["best_trial"] is None
    overall = described["overall_best_trial"]
    assert (overall["tuning_job"], overall["name"], overall["objective"]) == (
        "parent-1",
        parent_trials[6]["name"],
        0.1,
    )

    advance(settings, "tune-2")
    advance(settings, "tune-3")
    (first,) = describe(api, "tune-2")["trials"]
    (cold_first,) = describe(api, "tune-3")["trials"]
    # Ten trials told: Bayesian search (TPE) models them rather than sampling at random,
    # as it does for the same seed and trial without them.
    assert first["parameters"] != cold_first["parameters"]
    assert describe(api, "tune-3")["overall_best_trial"] is None

    end_job(settings, first["name"], loss=0.05)
    advance(settings, "tune-2")
    overall = describe(api, "tune-2")["overall_best_trial"]
    assert (overall["tuning_job"], overall["name"]) == ("tune-2", first["name"])


def test_transfer_learning_takes_other_data_and_has_no_overall_best(
    api: TestClient, settings: Settings, source_dir: Path, tmp_path: Path
) -> None:
    ended_parent(api, settings, source_dir)
    other = tmp_path / "other"
    other.mkdir()
    spec = warm(source_dir, "TransferLearning", training_job=_training_job(source_dir, other))
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 201, answer.text
    assert answer.json()["overall_best_trial"] is None
    assert answer.json()["spec"]["warm_start_config"] == spec["warm_start_config"]


def _other_objective(source_dir: Path) -> dict[str, Any]:
    return {"objective": {"type": "Maximize", "metric_name": "loss"}}


def _one_more_hyperparameter(source_dir: Path) -> dict[str, Any]:
    training = _training_job(source_dir)
    training["hyperparameters"] = {**training["hyperparameters"], "batch": 64}
    return {"training_job": training}


def _lr_as_integers(source_dir: Path) -> dict[str, Any]:
    ranges = tuning_spec(source_dir)["parameter_ranges"]
    return {
        "parameter_ranges": {
            "integer": [{"name": "lr", "min_value": 1, "max_value": 3}],
            "categorical": ranges["categorical"],
        }
    }


def _other_data(source_dir: Path) -> dict[str, Any]:
    return {"training_job": _training_job(source_dir, source_dir / "train.py")}


def _other_framework(source_dir: Path) -> dict[str, Any]:
    return {"training_job": {**_training_job(source_dir), "framework": "sklearn"}}


def _parents(*names: str) -> dict[str, Any]:
    return {
        "warm_start_config": {
            "warm_start_type": "IdenticalDataAndAlgorithm",
            "parent_tuning_jobs": list(names),
        }
    }


@pytest.mark.parametrize(
    ("change", "loc", "message"),
    [
        (
            lambda source: _parents("parent-9"),
            ["warm_start_config", "parent_tuning_jobs", 0],
            "no tuning job named 'parent-9' in project 'default'",
        ),
        (
            _other_objective,
            ["warm_start_config", "parent_tuning_jobs", 0],
            "tuning job 'parent-1' has another objective (Minimize 'loss')",
        ),
        (
            _one_more_hyperparameter,
            ["warm_start_config", "parent_tuning_jobs", 0],
            "has 3 hyperparameters, static and tuned, and this one 4",
        ),
        (
            _lr_as_integers,
            ["warm_start_config", "parent_tuning_jobs", 0],
            "tunes 'lr' as a continuous range, and this one as integer",
        ),
        (
            _other_data,
            ["warm_start_config", "parent_tuning_jobs", 0],
            "trained on other input channels",
        ),
        (
            _other_framework,
            ["warm_start_config", "parent_tuning_jobs", 0],
            "trained with another framework",
        ),
        (
            lambda source: _parents("parent-1", "parent-1"),
            ["warm_start_config", "parent_tuning_jobs"],
            "a parent tuning job is named twice",
        ),
        (
            lambda source: _parents(*(f"parent-{n}" for n in range(6))),
            ["warm_start_config", "parent_tuning_jobs"],
            "at most 5 items",
        ),
        (
            lambda source: {
                "strategy": "Grid",
                "resource_limits": {"max_parallel_training_jobs": 1},
                "parameter_ranges": {"integer": [{"name": "lr", "min_value": 1, "max_value": 2}]},
            },
            ["warm_start_config"],
            "the Grid strategy tries fixed points",
        ),
    ],
)
def test_a_parent_that_breaks_a_rule_is_refused_naming_it(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    change: Any,
    loc: list[Any],
    message: str,
) -> None:
    ended_parent(api, settings, source_dir)
    answer = api.post("/v1/tuning-jobs", json=warm(source_dir, **change(source_dir)))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", *loc]
    assert message in error["msg"]
    assert [item["name"] for item in api.get("/v1/tuning-jobs").json()["items"]] == ["parent-1"]


def test_a_parent_still_running_is_refused(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, name="parent-1", training_job=_training_job(source_dir))
    answer = api.post("/v1/tuning-jobs", json=warm(source_dir))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "warm_start_config", "parent_tuning_jobs", 0]
    assert "tuning job 'parent-1' is InProgress: a parent must have ended" in error["msg"]
