"""The SageMaker Python SDK v2 reads a finished job's metrics as a notebook does:
``estimator.training_job_analytics.dataframe()`` and ``TrainingJobAnalytics``, through
CloudWatch's GetMetricStatistics, with ``AWS_ENDPOINT_URL_CLOUDWATCH`` pointing at Runyard.

The SDK runs in a virtual environment of its own (``tests/e2e/sdk_venvs.py``), as in
``test_sagemaker_sdk.py``, whose server and S3 this module sets up the same way."""

from __future__ import annotations

import itertools
import subprocess

import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import Stack
from tests.e2e.sdk_venvs import sdk_python
from tests.e2e.test_sagemaker_sdk import (  # noqa: F401 - the module's fixtures, used here
    BUCKET,
    FIT_TIMEOUT,
    HERE,
    result_of,
    s3,
    sdk_environment,
    sdk_stack,
)
from tests.timeouts import scaled

pytestmark = pytest.mark.e2e

# What the script in metrics_job/ prints, a little over a second apart.
LOSSES = [0.9, 0.5, 0.25]


def test_training_job_analytics_reads_the_losses_the_job_printed(
    sdk_stack: Stack,  # noqa: F811
    s3: MotoServer,  # noqa: F811
) -> None:
    environment = {
        **sdk_environment(sdk_stack, s3),
        # botocore's name for CloudWatch's endpoint (its service id, "CloudWatch").
        "AWS_ENDPOINT_URL_CLOUDWATCH": sdk_stack.url,
    }
    source = HERE / "metrics_job"
    done = subprocess.run(
        [str(sdk_python("v2")), str(HERE / "analytics_v2.py"), str(source), BUCKET],
        env=environment,
        capture_output=True,
        text=True,
        timeout=scaled(FIT_TIMEOUT),
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{output}\n{sdk_stack.diagnostics()}"
    result = result_of(output)

    per_second = result["per_second"]
    assert per_second["value"] == LOSSES
    assert set(per_second["metric_name"]) == {"train:loss"}
    # Seconds since the first value, as the SDK computes them from the datapoints' times.
    elapsed = per_second["timestamp"]
    assert elapsed[0] == 0
    assert all(1 <= later - earlier <= 3 for earlier, later in itertools.pairwise(elapsed))

    # The SDK's default period is a minute: the values of each minute, averaged.
    per_minute = result["per_minute"]
    assert set(per_minute["metric_name"]) == {"train:loss"}
    assert 1 <= len(per_minute["value"]) <= 2
    if len(per_minute["value"]) == 1:
        assert per_minute["value"] == [pytest.approx(sum(LOSSES) / len(LOSSES))]
    assert all(min(LOSSES) <= value <= max(LOSSES) for value in per_minute["value"])

    with sdk_stack.client() as client:
        job = client.get_job(result["name"])
    assert job["status"] == "Completed"
    assert job["spec"]["metric_definitions"] == [{"name": "train:loss", "regex": "loss=([0-9.]+)"}]
