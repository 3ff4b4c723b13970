"""Tuning jobs over REST and the tuner's passes: trials are training jobs of the project,
never more than MaxParallelTrainingJobs at once, each submitted once whatever dies when,
their objectives read from their final metrics, and the tuning job ended by its trials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from service.tuning import tuner
from tests.conftest import make_settings
from tests.service.tuning.tuning import (
    advance,
    create,
    describe,
    end_job,
    refused,
    training_jobs,
    tuning_spec,
)


def trial_names(api: TestClient) -> list[str]:
    return [trial["name"] for trial in describe(api)["trials"]]


def test_a_tuning_job_is_created_in_progress_and_asks_for_trials_when_the_tuner_runs(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    created = create(api, source_dir)
    assert (created["status"], created["strategy"], created["trials"]) == (
        "InProgress",
        "Random",
        [],
    )
    assert created["spec"]["random_seed"] == 42
    assert created["spec"]["training_job"]["hyperparameters"] == {"epochs": 2}
    assert training_jobs(settings) == []

    advance(settings)
    trials = describe(api)["trials"]
    assert [t["number"] for t in trials] == [1, 2]
    jobs = training_jobs(settings)
    assert {job["name"] for job in jobs} == {t["name"] for t in trials}
    for trial in trials:
        assert trial["name"].startswith(f"tune-1-{trial['number']:03d}-")
        assert (trial["status"], trial["objective_status"]) == ("InProgress", "Pending")
        assert 0.0001 <= trial["parameters"]["lr"] <= 0.1
        assert trial["parameters"]["optimizer"] in ("adam", "sgd")
        job = next(job for job in jobs if job["name"] == trial["name"])
        # The static hyperparameters, the objective's name as SageMaker adds it to every
        # trial (the runtime keeps it from the script's arguments), the tuned ones.
        assert job["hyperparameters"] == {
            "epochs": 2,
            "_tuning_objective_metric": "loss",
            **trial["parameters"],
        }
        assert job["status"] == "InProgress"


def test_never_more_than_max_parallel_trials_run_and_each_end_asks_for_the_next(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir)
    advance(settings)
    advance(settings)  # a duplicate pass: nothing has ended, nothing more is asked
    first, second = trial_names(api)
    assert len(training_jobs(settings)) == 2

    end_job(settings, first, loss=0.5)
    advance(settings)
    described = describe(api)
    assert [t["status"] for t in described["trials"]] == ["Completed", "InProgress", "InProgress"]
    assert described["trials"][0]["objective"] == 0.5
    assert described["trials"][0]["objective_status"] == "Succeeded"
    assert described["best_trial"]["name"] == first

    end_job(settings, second, loss=0.25)
    end_job(settings, described["trials"][2]["name"], status="Failed")
    advance(settings)
    described = describe(api)
    assert len(described["trials"]) == 4  # max_number_of_training_jobs, never more
    assert described["status"] == "InProgress"
    assert described["training_job_counts"] == {
        "completed": 2,
        "in_progress": 1,
        "failed": 1,
        "stopped": 0,
    }
    assert described["objective_counts"] == {"succeeded": 2, "pending": 1, "failed": 1}
    assert described["best_trial"]["name"] == second

    end_job(settings, described["trials"][3]["name"], loss=0.75)
    advance(settings)
    advance(settings)
    described = describe(api)
    assert (described["status"], described["failure_reason"]) == ("Completed", None)
    assert described["ended_at"] is not None
    assert described["best_trial"]["objective"] == 0.25
    assert len(training_jobs(settings)) == 4


def test_maximize_takes_the_highest_objective_as_the_best(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir, objective={"type": "Maximize", "metric_name": "loss"})
    advance(settings)
    first, second = trial_names(api)
    end_job(settings, first, loss=0.5)
    end_job(settings, second, loss=0.9)
    advance(settings)
    assert describe(api)["best_trial"]["name"] == second


def test_a_tuner_that_dies_while_submitting_a_trial_submits_it_once_after_it_restarts(
    api: TestClient, settings: Settings, source_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(api, source_dir)
    asked: list[dict[str, Any]] = []
    submit = tuner.training.submit

    def dies_after_storing(*args: Any, **kwargs: Any) -> Any:
        submit(*args, **kwargs)  # stored in the pass's transaction...
        asked.append(dict(args[2].hyperparameters))
        raise SystemExit("worker killed")  # ...which never commits

    monkeypatch.setattr(tuner.training, "submit", dies_after_storing)
    with pytest.raises(SystemExit):
        advance(settings)
    assert describe(api)["trials"] == []
    assert training_jobs(settings) == []

    monkeypatch.setattr(tuner.training, "submit", submit)
    advance(settings)
    advance(settings)
    trials = describe(api)["trials"]
    jobs = training_jobs(settings)
    assert len(trials) == len(jobs) == 2
    assert sorted(job["name"] for job in jobs) == sorted(t["name"] for t in trials)
    # The restarted tuner asked trial 1 exactly what the one that died had asked.
    assert jobs[0]["hyperparameters"] == asked[0]


def test_two_tuning_jobs_with_one_seed_and_the_same_results_try_the_same_parameters(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    for name in ("tune-1", "tune-2"):
        create(api, source_dir, name=name, strategy="Bayesian")
    for _ in range(2):
        for name in ("tune-1", "tune-2"):
            advance(settings, name)
            for number, trial in enumerate(describe(api, name)["trials"], start=1):
                if trial["status"] == "InProgress":
                    end_job(settings, trial["name"], loss=number / 10)
    tried = [
        [t["parameters"] for t in describe(api, name)["trials"]] for name in ("tune-1", "tune-2")
    ]
    assert len(tried[0]) == 4
    assert tried[0] == tried[1]


def test_stopping_stops_the_running_trials_then_the_tuning_job(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir)
    advance(settings)
    stopped = api.post("/v1/tuning-jobs/tune-1/stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "Stopping"

    advance(settings)  # the trials' jobs never launched: they are Stopped at once
    assert {job["status"] for job in training_jobs(settings)} == {"Stopped"}
    advance(settings)
    described = describe(api)
    assert described["status"] == "Stopped"
    assert len(described["trials"]) == 2  # none asked for once stopping
    assert described["training_job_counts"]["stopped"] == 2
    again = api.post("/v1/tuning-jobs/tune-1/stop")
    assert again.status_code == 409
    assert "already ended (Stopped)" in again.json()["detail"]


def test_a_tuning_job_whose_trials_report_no_objective_fails_saying_so(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    limits = {"max_number_of_training_jobs": 1, "max_parallel_training_jobs": 1}
    create(api, source_dir, resource_limits=limits)
    advance(settings)
    (name,) = trial_names(api)
    end_job(settings, name)  # Completed, but its log had no loss
    advance(settings)
    described = describe(api)
    assert described["status"] == "Failed"
    assert described["failure_reason"] == (
        "none of the 1 training jobs reported the objective metric 'loss'"
    )
    assert described["objective_counts"] == {"succeeded": 0, "pending": 0, "failed": 1}


def test_a_grid_tries_each_combination_once(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    ranges = {
        "integer": [{"name": "layers", "min_value": 1, "max_value": 2}],
        "categorical": [{"name": "optimizer", "values": ["adam", "sgd"]}],
    }
    limits = {"max_parallel_training_jobs": 10}
    create(api, source_dir, strategy="Grid", parameter_ranges=ranges, resource_limits=limits)
    advance(settings)
    trials = describe(api)["trials"]
    assert sorted((t["parameters"]["layers"], t["parameters"]["optimizer"]) for t in trials) == [
        (1, "adam"),
        (1, "sgd"),
        (2, "adam"),
        (2, "sgd"),
    ]


def test_trials_refused_for_capacity_are_asked_for_once_capacity_frees(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    from runyard.server import prepare
    from service.app import create_app

    settings = make_settings(
        tmp_path / "home", database_url, capacity={"local": 1}, on_capacity_exceeded="refuse"
    )
    token = prepare(settings)
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = f"Bearer {token}"
        create(api, source_dir)
        advance(settings)
        (first,) = trial_names(api)  # the second would not fit: not asked for
        end_job(settings, first, loss=0.5)
        advance(settings)
        assert len(trial_names(api)) == 2
        assert len(training_jobs(settings)) == 2


def test_the_tuning_jobs_of_a_project_are_listed_newest_first_a_page_at_a_time(
    api: TestClient, source_dir: Path
) -> None:
    for name in ("tune-1", "tune-2", "tune-3"):
        create(api, source_dir, name=name)
    first = api.get("/v1/tuning-jobs", params={"limit": 2}).json()
    assert [item["name"] for item in first["items"]] == ["tune-3", "tune-2"]
    rest = api.get("/v1/tuning-jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert ([item["name"] for item in rest["items"]], rest["next_cursor"]) == (["tune-1"], None)
    assert api.get("/v1/tuning-jobs", params={"status": "Completed"}).json()["items"] == []


def test_a_listed_tuning_job_holds_its_counters_and_best_trial_as_described(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir)
    maximize = {"type": "Maximize", "metric_name": "loss"}
    grid = {"categorical": [{"name": "optimizer", "values": ["adam", "sgd", "rmsprop"]}]}
    create(
        api,
        source_dir,
        name="tune-2",
        strategy="Grid",
        objective=maximize,
        parameter_ranges=grid,
        resource_limits={"max_parallel_training_jobs": 3},
    )
    for name in ("tune-1", "tune-2"):
        advance(settings, name)
    first, second = trial_names(api)
    end_job(settings, first, loss=0.5)
    end_job(settings, second, loss=0.25)
    losses = iter([0.5, 0.75, 0.25])
    for trial in describe(api, "tune-2")["trials"]:
        end_job(settings, trial["name"], loss=next(losses))
    for name in ("tune-1", "tune-2"):
        advance(settings, name)

    listed = {item["name"]: item for item in api.get("/v1/tuning-jobs").json()["items"]}
    for name in ("tune-1", "tune-2"):
        described = describe(api, name)
        item = listed[name]
        for key in ("status", "objective", "max_trials", "training_job_counts"):
            assert item[key] == described[key], key
        assert item["objective_counts"] == described["objective_counts"]
        best = described["best_trial"]
        assert item["best_trial"] == {key: best[key] for key in item["best_trial"]}
    tune_1, tune_2 = listed["tune-1"], listed["tune-2"]
    assert tune_1["max_trials"] == 4
    assert tune_1["training_job_counts"] == {
        "completed": 2,
        "in_progress": 2,
        "failed": 0,
        "stopped": 0,
    }
    assert tune_1["objective_counts"] == {"succeeded": 2, "pending": 2, "failed": 0}
    assert (tune_1["best_trial"]["name"], tune_1["best_trial"]["objective"]) == (second, 0.25)
    # A Grid without a limit runs every point; Maximize takes the highest.
    assert (tune_2["status"], tune_2["max_trials"]) == ("Completed", 3)
    assert tune_2["objective"] == maximize
    assert tune_2["best_trial"]["objective"] == 0.75
    assert set(tune_2["best_trial"]) == {"number", "name", "definition", "status", "objective"}
    assert tune_2["best_trial"]["definition"] is None


def test_a_name_in_use_is_refused(api: TestClient, source_dir: Path) -> None:
    create(api, source_dir)
    again = api.post("/v1/tuning-jobs", json=tuning_spec(source_dir))
    assert again.status_code == 409
    assert again.json()["detail"] == "a tuning job named 'tune-1' already exists"


def test_a_viewer_may_read_but_not_create_or_stop(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    create(api, source_dir)
    made = api.post("/v1/tokens", json={"name": "viewer", "project": "default", "role": "viewer"})
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    assert api.get("/v1/tuning-jobs/tune-1", headers=headers).status_code == 200
    spec = tuning_spec(source_dir, name="tune-2")
    assert api.post("/v1/tuning-jobs", json=spec, headers=headers).status_code == 403
    assert api.post("/v1/tuning-jobs/tune-1/stop", headers=headers).status_code == 403
    assert api.get("/v1/tuning-jobs/nope").status_code == 404


def _range(**fields: Any) -> dict[str, Any]:
    return {"continuous": [{"name": "lr", "min_value": 0.1, "max_value": 1.0, **fields}]}


_LIMITS = {"max_number_of_training_jobs": 4, "max_parallel_training_jobs": 2}


def _training() -> dict[str, Any]:
    """The trials' training job of ``tuning_spec``, as the REST API takes it."""
    return dict(tuning_spec(Path("/src"))["training_job"])


@pytest.mark.parametrize(
    ("overrides", "loc", "message"),
    [
        (
            {"objective": {"type": "Minimize", "metric_name": "accuracy"}},
            ["objective", "metric_name"],
            "'accuracy' is not one of the training job's metric_definitions ('loss')",
        ),
        (
            {"name": "tuning-job-name-over-thirty-two-chars"},
            ["name"],
            "must be 1 to 32 letters, digits and hyphens",
        ),
        (
            {"parameter_ranges": _range(min_value=0.0, scaling_type="Logarithmic")},
            ["parameter_ranges", "continuous", 0, "min_value"],
            "must be above 0 for Logarithmic scaling",
        ),
        (
            {"parameter_ranges": _range(max_value=0.05)},
            ["parameter_ranges", "continuous", 0, "max_value"],
            "must be above min_value",
        ),
        (
            {"parameter_ranges": _range(scaling_type="ReverseLogarithmic")},
            ["parameter_ranges", "continuous", 0, "scaling_type"],
            "ReverseLogarithmic scaling needs 0 <= min_value and max_value < 1",
        ),
        (
            {"strategy": "Grid"},
            ["parameter_ranges", "continuous"],
            "the Grid strategy takes categorical and integer ranges only",
        ),
        (
            {"resource_limits": {"max_parallel_training_jobs": 2}},
            ["resource_limits", "max_number_of_training_jobs"],
            "required for the Random strategy",
        ),
        ({"strategy": "Annealing"}, ["strategy"], "Input should be"),
        (
            {"resource_limits": {**_LIMITS, "max_runtime_in_seconds": 119}},
            ["resource_limits", "max_runtime_in_seconds"],
            "Input should be greater than or equal to 120",
        ),
        (
            {"resource_limits": {**_LIMITS, "max_runtime_in_seconds": 15_768_001}},
            ["resource_limits", "max_runtime_in_seconds"],
            "Input should be less than or equal to 15768000",
        ),
        (
            {"training_job": {**_training(), "max_retry_attempts": 31}},
            ["training_job", "max_retry_attempts"],
            "Input should be less than or equal to 30",
        ),
        (
            {"parameter_ranges": {"categorical": [{"name": "epochs", "values": [1, 2]}]}},
            ["training_job", "hyperparameters", "epochs"],
            "is tuned: give it as a range, not as a static hyperparameter",
        ),
    ],
)
def test_a_spec_that_breaks_a_rule_is_refused_naming_the_field(
    api: TestClient, source_dir: Path, overrides: dict[str, Any], loc: list[Any], message: str
) -> None:
    refused(api, tuning_spec(source_dir, **overrides), loc, message)


def test_a_training_job_the_server_cannot_run_is_refused_naming_its_field(
    api: TestClient, source_dir: Path
) -> None:
    spec = tuning_spec(source_dir)
    spec["training_job"]["instance_type"] = "ml.p4d.24xlarge"
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "training_job", "instance_type"]
    assert "no backend on this server runs ml.p4d.24xlarge" in error["msg"]
    spec = tuning_spec(source_dir)
    spec["training_job"]["name"] = "mine"
    (error,) = api.post("/v1/tuning-jobs", json=spec).json()["detail"]
    assert error["loc"] == ["body", "training_job", "name"]


def test_a_tuning_jobs_tags_are_each_trials_over_the_training_jobs_own(
    api: TestClient, settings: Settings, source_dir: Path
) -> None:
    spec = tuning_spec(source_dir, tags={"team": "vision", "cost-center": "42"})
    spec["training_job"]["tags"] = [
        {"key": "team", "value": "nlp"},
        {"key": "owner", "value": "ada"},
    ]
    answer = api.post("/v1/tuning-jobs", json=spec)
    assert answer.status_code == 201, answer.text
    assert answer.json()["spec"]["tags"] == [
        {"key": "team", "value": "vision"},
        {"key": "cost-center", "value": "42"},
    ]
    advance(settings)
    for trial in describe(api)["trials"]:
        tags = api.get(f"/v1/training-jobs/{trial['name']}").json()["spec"]["tags"]
        assert {tag["key"]: tag["value"] for tag in tags} == {
            "team": "vision",
            "owner": "ada",
            "cost-center": "42",
        }


def test_tags_that_would_give_a_trial_too_many_are_refused(
    api: TestClient, source_dir: Path
) -> None:
    spec = tuning_spec(source_dir, tags={f"t{n}": "x" for n in range(30)})
    spec["training_job"]["tags"] = [{"key": f"j{n}", "value": "y"} for n in range(30)]
    refused(api, spec, ["tags"], "each trial's training job would have 60 tags, over the 50")
