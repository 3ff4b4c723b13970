"""`runyard tune` and `runyard tuning` against the API in this process, the tuner's passes
run as the worker would: a spec file's paths relative to it, progress while waiting, the
trials best first, stopping, and a refused spec naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from runyard import cli, client, tuning_commands
from service.settings import Settings
from tests.runyard.in_process import InProcessClient
from tests.service.tuning.test_warm_start import ended_parent, warm
from tests.service.tuning.tuning import advance, create, describe, end_job, tuning_spec


@pytest.fixture
def runyard(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setattr(tuning_commands, "Client", lambda: InProcessClient(api))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return CliRunner()


def _run(runner: CliRunner, *args: str, code: int = 0) -> Result:
    result = runner.invoke(cli.main, list(args))
    assert result.exit_code == code, (result.output, result.stderr, result.exception)
    return result


def _spec_file(folder: Path, source_dir: Path, **overrides: Any) -> Path:
    """A tuning job's spec file in ``folder``, its code and data given relative to it."""
    folder.mkdir(exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    spec = tuning_spec(source_dir, **overrides)
    training = spec["training_job"]
    del training["source_uri"]
    training["source_dir"] = str(Path("..") / source_dir.name)
    training["inputs"] = {"train": "data"}
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _trials_end_between_polls(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, api: TestClient, losses: list[float]
) -> None:
    """Each wait between two polls is a pass of the tuner after the running trials have
    ended, trial N with loss ``losses[N - 1]``."""
    passes = []

    def one_pass(_seconds: float) -> None:
        passes.append(1)
        assert len(passes) < 30, "the tuning job never ended"
        for trial in describe(api)["trials"]:
            if trial["status"] == "InProgress":
                end_job(settings, trial["name"], loss=losses[trial["number"] - 1])
        advance(settings)

    monkeypatch.setattr(client, "time", SimpleNamespace(sleep=one_pass))


def test_tune_creates_the_tuning_job_of_a_spec_file_its_paths_relative_to_the_file(
    api: TestClient, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    spec_file = _spec_file(tmp_path / "experiment", source_dir)
    created = _run(runyard, "tune", str(spec_file), "--name", "tune-2")
    assert created.stdout == "Created tuning job tune-2\n"
    training = describe(api, "tune-2")["spec"]["training_job"]
    # The code was packed and stored on the server, as `runyard submit` stores it.
    assert training["source_uri"].endswith(".tar.gz")
    assert training["source_uri"] != source_dir.as_uri()
    assert training["inputs"]["train"]["uri"] == (tmp_path / "experiment" / "data").as_uri()
    assert training["hyperparameters"] == {"epochs": 2}


def test_tune_wait_prints_the_trials_and_the_best_so_far_until_it_completes(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _trials_end_between_polls(monkeypatch, settings, api, [0.5, 0.75, 0.25, 0.4])
    result = _run(runyard, "tune", str(_spec_file(tmp_path / "exp", source_dir)), "--wait")
    lines = result.stdout.splitlines()
    assert lines[0] == "Created tuning job tune-1"
    assert lines[1] == ("InProgress: 0 trials started, 0 ended of 4; best so far: none yet")
    assert lines[-1].startswith(
        "Completed: 4 trials started, 4 ended of 4; best so far: tune-1-003-"
    )
    assert "(loss 0.25; lr=" in lines[-1]
    # Trials 1 and 2 end together, 1 the better; then 3 and 4, 3 the best of all.
    assert any(
        line.startswith("InProgress: 4 trials started, 2 ended of 4; best so far: tune-1-001-")
        for line in lines
    ), lines


def test_a_tuning_job_that_does_not_complete_exits_non_zero_saying_why(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {"max_number_of_training_jobs": 1, "max_parallel_training_jobs": 1}
    spec_file = _spec_file(tmp_path / "exp", source_dir, resource_limits=limits)
    monkeypatch.setattr(
        client, "time", SimpleNamespace(sleep=lambda _s: _end_without_loss(api, settings))
    )
    result = _run(runyard, "tune", str(spec_file), "--wait", code=1)
    assert result.stdout.splitlines()[-1] == (
        "Failure reason: none of the 1 training jobs reported the objective metric 'loss'"
    )


def _end_without_loss(api: TestClient, settings: Settings) -> None:
    for trial in describe(api)["trials"]:
        if trial["status"] == "InProgress":
            end_job(settings, trial["name"])
    advance(settings)


def test_list_and_describe_show_the_counters_and_the_trials_best_first(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    _run(runyard, "tune", str(_spec_file(tmp_path / "exp", source_dir)))
    advance(settings)
    first, second = describe(api)["trials"]
    end_job(settings, first["name"], loss=0.5)
    end_job(settings, second["name"], loss=0.25)
    advance(settings)  # both ended: two more trials are asked for

    listed = _run(runyard, "tuning", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "STATUS", "TRIALS", "BEST", "CREATED"]
    assert listed[1].split()[:4] == ["tune-1", "InProgress", "2/4", "0.25"]
    as_json = json.loads(_run(runyard, "tuning", "list", "-o", "json").stdout)
    assert as_json == api.get("/v1/tuning-jobs").json()

    lines = _run(runyard, "tuning", "describe", "tune-1").stdout.splitlines()
    assert "Status:           InProgress" in lines
    assert "Strategy:         Random (seed 42)" in lines
    assert "Objective:        Minimize loss" in lines
    assert "Trials:           4 started, 2 ended, 4 in all, 2 at once" in lines
    assert "Training jobs:    2 completed, 2 in progress, 0 failed, 0 stopped" in lines
    assert "Objectives:       2 succeeded, 2 pending, 0 failed" in lines
    ranges = lines.index("Ranges:")
    assert lines[ranges + 2].split()[:2] == ["lr", "continuous"]
    assert lines[ranges + 3].split() == ["optimizer", "categorical", "adam,", "sgd"]
    best = next(line for line in lines if line.startswith("Best trial:"))
    assert best.startswith(f"Best trial:       {second['name']} (loss 0.25; lr=")
    table = lines[lines.index("Trials (best first):") + 1 :]
    assert table[0].split()[:4] == ["#", "TRAINING", "JOB", "STATUS"]
    # Best first by the objective, the trials without one after, by number.
    assert [row.split()[0] for row in table[1:]] == ["2", "1", "3", "4"]
    assert table[1].split()[2:4] == ["Completed", "0.25"]
    assert table[3].split()[2:4] == ["InProgress", "-"]
    described = json.loads(_run(runyard, "tuning", "describe", "tune-1", "-o", "json").stdout)
    assert described == api.get("/v1/tuning-jobs/tune-1").json()


def test_list_makes_one_request_a_page_whatever_its_number_of_tuning_jobs(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("tune-1", "tune-2", "tune-3"):
        assert api.post("/v1/tuning-jobs", json=tuning_spec(source_dir, name=name)).is_success
        advance(settings, name)
    end_job(settings, describe(api, "tune-2")["trials"][0]["name"], loss=0.125)
    advance(settings, "tune-2")
    asked: list[tuple[str, str]] = []
    request = api.request

    def counted(method: str, url: str, **kwargs: Any) -> Any:
        asked.append((method, str(url)))
        return request(method, url, **kwargs)

    monkeypatch.setattr(api, "request", counted)
    listed = _run(runyard, "tuning", "list", "--limit", "2").stdout.splitlines()
    assert asked == [("GET", "/v1/tuning-jobs")]
    assert [line.split()[:4] for line in listed[1:3]] == [
        ["tune-3", "InProgress", "0/4", "-"],
        ["tune-2", "InProgress", "1/4", "0.125"],
    ]
    assert listed[3].startswith("more: runyard tuning list --cursor ")


def test_stop_stops_the_tuning_job_and_waits_for_its_trials(
    api: TestClient,
    settings: Settings,
    source_dir: Path,
    runyard: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _run(runyard, "tune", str(_spec_file(tmp_path / "exp", source_dir)))
    advance(settings)
    monkeypatch.setattr(client, "time", SimpleNamespace(sleep=lambda _s: advance(settings)))
    stopped = _run(runyard, "tuning", "stop", "tune-1", "--wait")
    assert stopped.stdout == "tune-1: Stopping\ntune-1: Stopped\n"
    assert describe(api)["training_job_counts"]["stopped"] == 2
    again = _run(runyard, "tuning", "stop", "tune-1", code=1)
    assert "already ended (Stopped)" in again.stderr


def test_a_refused_spec_names_the_field_of_the_file(
    api: TestClient, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    ranges = {"continuous": [{"name": "lr", "min_value": 0.1, "max_value": 0.01}]}
    spec_file = _spec_file(tmp_path / "exp", source_dir, parameter_ranges=ranges)
    refused = _run(runyard, "tune", str(spec_file), code=1)
    assert refused.stderr.startswith(
        f"error: {spec_file}: parameter_ranges.continuous.0.max_value: "
    )
    assert "must be above min_value" in refused.stderr
    assert "(HTTP 422)" in refused.stderr
    assert api.get("/v1/tuning-jobs").json()["items"] == []

    no_file = _run(runyard, "tuning", "describe", "tune-9", code=1)
    assert no_file.stderr.startswith("error: ")


def test_describe_shows_a_warm_start_and_its_overall_best(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner
) -> None:
    parent_trials = ended_parent(api, settings, source_dir)
    create(api, source_dir, **warm(source_dir))
    lines = _run(runyard, "tuning", "describe", "tune-2").stdout.splitlines()
    assert "Warm start:       IdenticalDataAndAlgorithm from parent-1" in lines
    assert f"Overall best:     {parent_trials[6]['name']} of parent-1 (loss 0.1)" in lines


def test_a_spec_file_of_several_definitions_uploads_each_and_describe_names_them(
    api: TestClient, settings: Settings, source_dir: Path, runyard: CliRunner, tmp_path: Path
) -> None:
    from tests.service.tuning.test_definitions import two_definitions

    folder = tmp_path / "exp"
    folder.mkdir()
    spec = two_definitions(source_dir)
    for definition in spec["training_job_definitions"]:
        training = definition["training_job"]
        del training["source_uri"]
        training["source_dir"] = str(Path("..") / source_dir.name)
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump(spec))
    _run(runyard, "tune", str(path))
    created = describe(api)
    for definition in created["spec"]["training_job_definitions"]:
        assert definition["training_job"]["source_uri"]  # each packed and uploaded
    advance(settings)
    tree = next(t for t in describe(api)["trials"] if t["definition"] == "tree")
    end_job(settings, tree["name"], loss=0.125, metric="error")
    advance(settings)

    lines = _run(runyard, "tuning", "describe", "tune-1").stdout.splitlines()
    assert "Objective:        Minimize loss (mlp), error (tree)" in lines
    ranges = lines.index("Ranges:")
    assert lines[ranges + 1].split() == ["DEFINITION", "NAME", "KIND", "VALUES"]
    assert lines[ranges + 2].split()[:3] == ["mlp", "lr", "continuous"]
    depth = next(line.split()[:3] for line in lines[ranges:] if "depth" in line)
    assert depth == ["tree", "depth", "integer"]
    best = next(line for line in lines if line.startswith("Best trial:"))
    assert best.startswith(f"Best trial:       {tree['name']} (error 0.125; ")
    table = lines[lines.index("Trials (best first):") + 1 :]
    assert table[0].split()[:5] == ["#", "TRAINING", "JOB", "DEFINITION", "STATUS"]
    assert table[1].split()[2:5] == ["tree", "Completed", "0.125"]
