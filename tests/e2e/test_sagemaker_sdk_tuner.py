"""The SageMaker Python SDK v2's own HyperparameterTuner runs unchanged against Runyard:
``fit()`` creates the tuning job, Runyard's tuner runs its trials as training jobs (never
more than ``max_parallel_jobs`` at once), ``wait()`` sees it complete, and
``best_training_job()`` names the trial with the lowest loss its script printed.

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
