"""The tuner's passes with early stopping (TrainingJobEarlyStoppingType Auto) and with
Hyperband: the running trials' objective points, as metric ingestion stores them, decide
which trials are stopped; a stopped trial ends Stopped saying why, and still counts with
its last value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.kit.db import session_scope
from service.settings import Settings
from service.tuning import tuner
from service.tuning.models import TuningTrial
from tests.service.tuning.tuning import (
    advance,
    create,
    describe,
    end_job,
    refused,
    report,
    tuning_spec,
)

FIVE = {"max_number_of_training_jobs": 5, "max_parallel_training_jobs": 2}


def trials(api: TestClient, name: str = "tune-1") -> list[dict[str, Any]]:
    return list(describe(api, name)["trials"])


def complete(settings: Settings, name: str, losses: list[float]) -> None:
    report(settings, name, losses)
    end_job(settings, name)  # its final loss is the last one reported


def three_completed(api: TestClient, settings: Settings, **overrides: Any) -> list[str]:
    """Trials 1 to 3 completed, each with a running average of 0.1 at step 3 but a bad
    final loss (2.0); trials 4 and 5 running. Their names, in order."""
    create(api, Path(overrides.pop("source_dir")), resource_limits=FIVE, **overrides)
    advance(settings)
    first, second = (t["name"] for t in trials(api))
    complete(settings, first, [0.1, 0.1, 0.1, 2.0])
    complete(settings, second, [0.1, 0.1, 0.1, 2.0])
    advance(settings)
    third = trials(api)[2]["name"]
    complete(settings, third, [0.1, 0.1, 0.1, 2.0])
    advance(settings)
    names = [t["name"] for t in trials(api)]
    assert len(names) == 5
    return names


def test_a_running_trial_worse_than_the_median_is_stopped_saying_why_and_still_counts(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    names = three_completed(api, settings, source_dir=source_dir, early_stopping_type="Auto")
    report(settings, names[3], [0.5, 0.4, 0.3])  # best 0.3, over the median 0.1
    report(settings, names[4], [0.1])  # at step 1: 0.1, not over the median 0.1
    advance(settings)
    advance(settings)  # takes in the end of the trial the first pass stopped
    fourth, fifth = trials(api)[3:]
    assert (fourth["status"], fifth["status"]) == ("Stopped", "InProgress")
    assert fourth["failure_reason"].startswith("Stopped early: at step 3, its best objective")
    assert "median stopping rule" in fourth["failure_reason"]
    # Its last value is its objective: better than the completed trials' final 2.0, it is
    # the best trial so far.
    assert (fourth["objective"], fourth["objective_status"]) == (0.3, "Succeeded")
    described = describe(api)
    assert described["best_trial"]["name"] == names[3]
    assert described["training_job_counts"]["stopped"] == 1
    job = api.get(f"/v1/training-jobs/{names[3]}").json()
    assert any("median stopping rule" in t["message"] for t in job["transitions"])

    # Its best so far counts, not its latest: worse values later do not stop it.
    report(settings, names[4], [0.9, 0.9])
    advance(settings)
    assert trials(api)[4]["status"] == "InProgress"
    end_job(settings, names[4])
    advance(settings)
    assert describe(api)["status"] == "Completed"


def test_without_early_stopping_the_same_points_stop_nothing(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    names = three_completed(api, settings, source_dir=source_dir)
    report(settings, names[3], [0.5, 0.4, 0.3])
    advance(settings)
    assert [t["status"] for t in trials(api)][3:] == ["InProgress", "InProgress"]


def test_the_running_averages_decide_not_the_completed_trials_last_values(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    # At step 4 the completed trials' values are 2.0, their running averages 0.575: a
    # trial at 1.0 is over the averages' median and under the values'.
    names = three_completed(api, settings, source_dir=source_dir, early_stopping_type="Auto")
    report(settings, names[3], [1.0, 1.0, 1.0, 1.0])
    advance(settings)
    advance(settings)
    assert trials(api)[3]["status"] == "Stopped"


def test_the_points_of_other_hosts_and_metrics_count_for_nothing(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    names = three_completed(api, settings, source_dir=source_dir, early_stopping_type="Auto")
    report(settings, names[3], [0.5, 0.4, 0.3], host="algo-2")
    report(settings, names[3], [0.5, 0.4, 0.3], metric="accuracy")
    advance(settings)
    assert trials(api)[3]["status"] == "InProgress"


def test_a_trial_whose_stop_was_lost_is_stopped_by_the_next_pass(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = three_completed(api, settings, source_dir=source_dir, early_stopping_type="Auto")
    report(settings, names[3], [0.5, 0.4, 0.3])
    stop = tuner._stop_trial
    monkeypatch.setattr(tuner, "_stop_trial", lambda *args: None)  # the worker died here
    advance(settings)
    assert trials(api)[3]["status"] == "InProgress"
    monkeypatch.setattr(tuner, "_stop_trial", stop)
    advance(settings)
    advance(settings)
    assert trials(api)[3]["status"] == "Stopped"
    assert "median stopping rule" in trials(api)[3]["failure_reason"]


def hyperband(**config: Any) -> dict[str, Any]:
    return {
        "strategy": "Hyperband",
        "strategy_config": {"hyperband_strategy_config": config},
        "resource_limits": {"max_number_of_training_jobs": 12, "max_parallel_training_jobs": 12},
    }


def notes(settings: Settings) -> dict[int, dict[str, Any]]:
    with session_scope(settings.database_url, readonly=True) as session:
        return {
            trial.number: dict(trial.strategy_notes)
            for trial in session.scalars(select(TuningTrial))
        }


def test_hyperband_stops_the_losers_of_a_rung_keeps_its_notes_and_decides_again_alike(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, **hyperband(min_resource=1, max_resource=9))
    advance(settings)
    running = trials(api)
    assert len(running) == 12
    for number, trial in enumerate(running, start=1):
        report(settings, trial["name"], [number / 10])
    advance(settings)
    advance(settings)
    stopped = [t["number"] for t in trials(api) if t["status"] == "Stopped"]
    assert stopped
    assert 1 not in stopped  # the best of all goes on, whatever its bracket
    for trial in trials(api):
        if trial["status"] == "Stopped":
            assert trial["failure_reason"].startswith("Stopped early by Hyperband: at step 1")
    kept = notes(settings)
    # The value each had at the rung it was judged at, as the pruner noted it.
    assert all(kept[number]["completed_rung_0"] == number / 10 for number in stopped)
    advance(settings)  # nothing new: the notes kept decide as before
    assert [t["number"] for t in trials(api) if t["status"] == "Stopped"] == stopped
    assert notes(settings) == kept


def test_hyperband_stops_a_trial_at_max_resource_read_from_the_epochs(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, **hyperband())  # MaxResource: the static "epochs" (2)
    advance(settings)
    first = trials(api)[0]["name"]
    report(settings, first, [0.5, 0.4])
    advance(settings)
    advance(settings)
    trial = trials(api)[0]
    assert trial["status"] == "Stopped"
    assert trial["failure_reason"] == "Stopped by Hyperband: it reached MaxResource (2 steps)"
    assert (trial["objective"], trial["objective_status"]) == (0.4, "Succeeded")


@pytest.mark.parametrize(
    ("overrides", "loc", "message"),
    [
        (
            {**hyperband(), "early_stopping_type": "Auto"},
            ["early_stopping_type"],
            "must be Off with Hyperband",
        ),
        (
            hyperband(min_resource=5, max_resource=3),
            ["strategy_config", "hyperband_strategy_config", "max_resource"],
            "must be at least the minimum resource",
        ),
        (
            hyperband(min_resource=0),
            ["strategy_config", "hyperband_strategy_config", "min_resource"],
            "greater than or equal to 1",
        ),
        (
            hyperband(max_resource=20_001),
            ["strategy_config", "hyperband_strategy_config", "max_resource"],
            "less than or equal to 20000",
        ),
        (
            hyperband(min_resource=3),  # the epochs (2) are below it
            ["strategy_config", "hyperband_strategy_config", "max_resource"],
            "2 (from the static hyperparameters) is below the minimum resource 3",
        ),
        (
            {"strategy_config": {"hyperband_strategy_config": {"max_resource": 3}}},
            ["strategy_config"],
            "only for the Hyperband strategy",
        ),
        ({"early_stopping_type": "Sometimes"}, ["early_stopping_type"], "Input should be"),
    ],
)
def test_early_stopping_and_hyperband_that_break_a_rule_are_refused_naming_the_field(
    api: TestClient, source_dir: Path, overrides: dict[str, Any], loc: list[Any], message: str
) -> None:
    refused(api, tuning_spec(source_dir, **overrides), loc, message)


def test_hyperband_without_max_resource_or_epochs_is_refused(
    api: TestClient, source_dir: Path
) -> None:
    spec = tuning_spec(source_dir, **hyperband(min_resource=1))
    spec["training_job"]["hyperparameters"] = {"batch-size": 8}
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "strategy_config", "hyperband_strategy_config", "max_resource"]
    assert error["msg"].startswith("required: give it, or one of")
