"""The SageMaker SDK v2's ``Estimator.attach`` and ``PyTorch.attach`` on a job that was
submitted through Runyard's own API, not through the SDK: the describe answer carries
everything the SDK rebuilds an estimator from."""

from __future__ import annotations

import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import Stack
from tests.e2e.test_sagemaker_sdk import BUCKET, result_of, run_sdk

# That module's fixtures: a server whose instances reach S3 (moto), the SDK's settings.
from tests.e2e.test_sagemaker_sdk import s3 as s3
from tests.e2e.test_sagemaker_sdk import sdk_stack as sdk_stack

pytestmark = pytest.mark.e2e


def test_estimators_attach_to_a_job_submitted_through_the_api(
    sdk_stack: Stack, s3: MotoServer
) -> None:
    with sdk_stack.client() as client:
        job = sdk_stack.submit(
            client,
            "scripts",
            entry_point="mpi_hello.py",
            # The SDK takes "local" for its own local mode: a SageMaker type, as users name.
            instance_type="ml.m5.large",
            instance_count=2,
            distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
            hyperparameters={"epochs": 2, "optimizer": "adam"},
            # The SDK refuses a file:// output outside its local mode: a team using it
            # keeps its models on S3.
            output_path=f"s3://{BUCKET}/api-jobs",
        )
        ended = sdk_stack.wait_until_ended(client, job["name"])
    assert ended["status"] == "Completed", sdk_stack.explain(ended)
    result = result_of(run_sdk(sdk_stack, s3, "v2", "attach_v2.py", job["name"]))
    assert result["role"].startswith("arn:aws:iam::")
    assert (result["instance_count"], result["instance_type"]) == (2, "ml.m5.large")
    assert result["output_path"] == job["spec"]["output_path"]
    assert result["model_data"] == ended["model_artifacts"]
    assert (result["entry_point"], result["source_dir"]) == (
        "mpi_hello.py",
        job["spec"]["source_uri"],
    )
    hyperparameters = result["hyperparameters"]
    assert (hyperparameters["epochs"], hyperparameters["optimizer"]) == ("2", '"adam"')
    # What the SDK would have sent for the distribution, which SageMaker's containers read.
    assert hyperparameters["sagemaker_mpi_enabled"] == "true"
    assert hyperparameters["sagemaker_mpi_num_of_processes_per_host"] == "2"
