"""The SageMaker Python SDK v2's own HyperparameterTuner runs unchanged against Runyard:
``fit()`` creates the tuning job, Runyard's tuner runs its trials as training jobs (never
more than ``max_parallel_jobs`` at once), ``wait()`` sees it complete, and
``best_training_job()`` names the trial with the lowest loss its script printed. With
``early_stopping_type="Auto"`` it is accepted and echoed; its
``identical_dataset_and_algorithm_tuner()`` runs a warm start whose overall best is the
best of both, ``attach`` reads that warm start back, and ``analytics().dataframe()``
tables the trials; ``strategy="Hyperband"`` with a
``strategy_config`` stops every trial before it ends, each counting its last loss;
``"Bayesian"`` and ``"Grid"`` (every point once) run their trials and name the best;
``HyperparameterTuner.create`` over two estimators runs each definition's trials with its
own ranges and metric, and ``attach``, ``best_estimator()`` and ``analytics()`` read them.

The SDK runs in a virtual environment of its own (``tests/e2e/sdk_venvs.py``), as in
``test_sagemaker_sdk.py``, whose server and S3 this module sets up the same way."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import Stack
from tests.e2e.test_sagemaker_sdk import (  # noqa: F401 - the module's fixtures, used here
    BUCKET,
    HERE,
    result_of,
    run_sdk,
    s3,
    sdk_stack,
)

pytestmark = pytest.mark.e2e


def test_the_sdks_tuner_fits_waits_and_names_the_best_training_job(
    sdk_stack: Stack,  # noqa: F811
    s3: MotoServer,  # noqa: F811
) -> None:
    output = run_sdk(sdk_stack, s3, "v2", "tune_v2.py", str(HERE / "tune_job"), BUCKET)
    result = result_of(output)
    assert result["status"] == "Completed"
    # Early stopping on: with fewer than 3 trials completed, the median rule stops none.
    assert result["config"]["TrainingJobEarlyStoppingType"] == "Auto"
    assert result["counters"]["Completed"] == 3
    trials = result["trials"]
    assert len(trials) == 3
    for trial in trials:
        assert trial["status"] == "Completed"
        assert 0.0 <= trial["shift"] <= 1.0
        # The final loss the script printed for the shift it was given (its last epoch's).
        assert trial["loss"] == pytest.approx((trial["shift"] - 0.3) ** 2 + 0.05, abs=1e-5)
    best = min(trials, key=lambda trial: trial["loss"])
    assert (result["best"], result["best_loss"]) == (best["name"], best["loss"])

    with sdk_stack.client() as client:
        jobs = [client.get_job(trial["name"]) for trial in trials]
    # Never more than max_parallel_jobs (2) trials at once: the third began only after
    # one of the first two had ended.
    spans = sorted(
        (datetime.fromisoformat(job["created_at"]), datetime.fromisoformat(job["ended_at"]))
        for job in jobs
    )
    assert min(spans[0][1], spans[1][1]) <= spans[2][0]
    assert {job["spec"]["hyperparameters"]["epochs"] for job in jobs} == {2}

    warm = result["warm"]
    assert warm["status"] == "Completed"
    assert warm["warm_start"] == {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": result["name"]}],
        "WarmStartType": "IdenticalDataAndAlgorithm",
    }
    assert (warm["attached_type"], warm["attached_parents"], warm["attached_max_jobs"]) == (
        "IdenticalDataAndAlgorithm",
        [result["name"]],
        1,
    )
    # The best of the parent's three trials and the warm start's one.
    if warm["overall_best_of"] == result["name"]:
        assert warm["overall_best"] == best["name"]
    else:
        assert warm["overall_best"] == warm["best"]

    analytics = result["analytics"]
    assert {"TrainingJobName", "TrainingJobStatus", "FinalObjectiveValue", "shift"} <= set(
        analytics["columns"]
    )
    assert sorted((row["name"], row["loss"]) for row in analytics["rows"]) == sorted(
        (trial["name"], pytest.approx(trial["loss"])) for trial in trials
    )


def test_the_sdks_hyperband_tuner_stops_each_trial_at_max_resource_or_as_a_rungs_loser(
    sdk_stack: Stack,  # noqa: F811
    s3: MotoServer,  # noqa: F811
) -> None:
    output = run_sdk(sdk_stack, s3, "v2", "tune_v2.py", str(HERE / "tune_job"), BUCKET, "hyperband")
    result = result_of(output)
    assert result["status"] == "Completed"
    assert result["config"]["Strategy"] == "Hyperband"
    assert result["config"]["StrategyConfig"] == {
        "HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 2}
    }
    assert result["counters"]["Stopped"] == 3
    for trial in result["trials"]:
        assert (trial["status"], trial["objective_status"]) == ("Stopped", "Succeeded")
        # At MaxResource (2 steps), or before it as a loser of its bracket's first rung.
        assert trial["reason"] == (
            "Stopped by Hyperband: it reached MaxResource (2 steps)"
        ) or trial["reason"].startswith("Stopped early by Hyperband: at step 1, "), trial
        # Stopped before it ended its six epochs: the last loss it reported counts.
        losses = [(trial["shift"] - 0.3) ** 2 + 0.1 / epoch for epoch in range(1, 7)]
        assert any(trial["loss"] == pytest.approx(loss, abs=1e-5) for loss in losses)
    best = min(result["trials"], key=lambda trial: trial["loss"])
    assert result["best"] == best["name"]


def test_the_sdks_bayesian_and_grid_tuners_run_their_trials_and_name_the_best(
    sdk_stack: Stack,  # noqa: F811
    s3: MotoServer,  # noqa: F811
) -> None:
    output = run_sdk(sdk_stack, s3, "v2", "tune_strategies_v2.py", str(HERE / "tune_job"), BUCKET)
    result = result_of(output)

    bayesian = result["bayesian"]
    assert (bayesian["status"], bayesian["strategy"]) == ("Completed", "Bayesian")
    assert len(bayesian["trials"]) == 2
    for trial in bayesian["trials"]:
        shift = float(trial["tuned"]["shift"])
        assert 0.0 <= shift <= 1.0
        assert trial["loss"] == pytest.approx((shift - 0.3) ** 2 + 0.1, abs=1e-5)
    assert bayesian["best"] == min(bayesian["trials"], key=lambda t: t["loss"])["name"]

    grid = result["grid"]
    assert (grid["status"], grid["strategy"]) == ("Completed", "Grid")
    # Every point of the grid once; the best is shift 0.3 after 2 epochs.
    points = sorted((t["tuned"]["shift"], t["tuned"]["epochs"]) for t in grid["trials"])
    assert points == [('"0.1"', "1"), ('"0.1"', "2"), ('"0.3"', "1"), ('"0.3"', "2")]
    (best,) = [t for t in grid["trials"] if t["tuned"] == {"shift": '"0.3"', "epochs": "2"}]
    assert grid["best"] == best["name"]
    assert best["loss"] == pytest.approx(0.05, abs=1e-5)


def test_the_sdks_tuner_of_several_estimators_runs_each_definitions_trials(
    sdk_stack: Stack,  # noqa: F811
    s3: MotoServer,  # noqa: F811
) -> None:
    output = run_sdk(sdk_stack, s3, "v2", "tune_definitions_v2.py", str(HERE / "tune_job"), BUCKET)
    result = result_of(output)
    assert result["status"] == "Completed"
    assert sorted(result["definitions"]) == ["narrow", "wide"]
    # Each definition's own input channel, from the inputs given by estimator.
    assert result["channels"] == {"narrow": ["training"], "wide": ["training"]}
    trials = result["trials"]
    assert len(trials) == 4
    # Seed 5's four asks take both definitions.
    assert {trial["definition"] for trial in trials} == {"narrow", "wide"}
    for trial in trials:
        tuned, shift = trial["tuned"], float(trial["tuned"]["shift"])
        if trial["definition"] == "narrow":
            # Its range, its static epochs (1), its metric.
            assert set(tuned) == {"shift"}
            assert 0.2 <= shift <= 0.4
            assert trial["metric"] == "loss"
            assert trial["loss"] == pytest.approx((shift - 0.3) ** 2 + 0.1, abs=1e-5)
        else:
            assert trial["definition"] == "wide"
            assert set(tuned) == {"shift", "epochs"}
            assert 0.0 <= shift <= 1.0
            assert trial["metric"] == "wide_loss"
            epochs = int(tuned["epochs"])
            assert trial["loss"] == pytest.approx((shift - 0.3) ** 2 + 0.1 / epochs, abs=1e-5)
    best = min(trials, key=lambda trial: trial["loss"])
    assert (result["best"], result["best_definition"]) == (best["name"], best["definition"])
    assert result["best_estimator_job"] == best["name"]
    assert result["attached"] == {
        "estimators": ["narrow", "wide"],
        "classes": ["PyTorch"],
        "metrics": {"narrow": "loss", "wide": "wide_loss"},
        "ranges": {"narrow": ["shift"], "wide": ["epochs", "shift"]},
    }
    assert "TrainingJobDefinitionName" in result["analytics"]["columns"]
    assert result["analytics"]["definitions"] == sorted(t["definition"] for t in trials)
    assert result["analytics"]["ranges_as_given"] is True
