"""boto3's sagemaker client against a tuning job's own MaxRuntimeInSeconds and its
training job definition's RetryStrategy: read, echoed, enforced, and refused out of the
ranges SageMaker documents, naming the member."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import UNCHECKED, check_answer, client
from tests.service.sagemaker.test_tuning_jobs import error_of, tuning_request
from tests.service.tuning.test_runtime_and_retry import RUNTIME_REASON, age
from tests.service.tuning.tuning import advance, end_job, tuning_spec

LIMITS = {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2}


def test_max_runtime_is_echoed_and_ends_the_tuning_job_stopped_with_its_reason(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    limits = {**LIMITS, "MaxRuntimeInSeconds": 600}
    sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir, ResourceLimits=limits))
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert described["HyperParameterTuningJobConfig"]["ResourceLimits"] == limits
    listed = sm.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"]
    check_answer(sm, "ListHyperParameterTuningJobs", {"HyperParameterTuningJobSummaries": listed})
    assert listed[0]["ResourceLimits"] == limits

    advance(settings)
    first, second = (
        s["TrainingJobName"]
        for s in sm.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName="tune-1", SortBy="CreationTime", SortOrder="Ascending"
        )["TrainingJobSummaries"]
    )
    end_job(settings, first, loss=0.5)
    age(settings, 600)
    advance(settings)
    advance(settings)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    assert described["FailureReason"] == RUNTIME_REASON
    assert described["TrainingJobStatusCounters"] == {
        "Completed": 1,
        "InProgress": 0,
        "RetryableError": 0,
        "NonRetryableError": 0,
        "Stopped": 1,
    }
    assert described["BestTrainingJob"]["TrainingJobName"] == first
    trial = sm.describe_training_job(TrainingJobName=second)
    assert trial["TrainingJobStatus"] == "Stopped"


def test_the_definitions_retry_strategy_is_each_trials_training_jobs(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    request = tuning_request(source_dir)
    request["TrainingJobDefinition"]["RetryStrategy"] = {"MaximumRetryAttempts": 2}
    sm.create_hyper_parameter_tuning_job(**request)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert described["TrainingJobDefinition"]["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    advance(settings)
    summaries = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-1"
    )["TrainingJobSummaries"]
    assert len(summaries) == 2
    for summary in summaries:
        job = sm.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        assert job["RetryStrategy"] == {"MaximumRetryAttempts": 2}


def test_a_rest_tuning_job_shows_its_runtime_and_retry_strategy_over_the_wire(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    spec = tuning_spec(source_dir)
    spec["resource_limits"]["max_runtime_in_seconds"] = 3600
    spec["training_job"]["max_retry_attempts"] = 3
    assert api.post("/v1/tuning-jobs", json=spec).status_code == 201
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobConfig"]["ResourceLimits"] == {
        "MaxNumberOfTrainingJobs": 4,
        "MaxParallelTrainingJobs": 2,
        "MaxRuntimeInSeconds": 3600,
    }
    assert described["TrainingJobDefinition"]["RetryStrategy"] == {"MaximumRetryAttempts": 3}


_CONFIG_LIMIT = "hyperParameterTuningJobConfig.resourceLimits.maxRuntimeInSeconds"
_RETRIES = "trainingJobDefinition.retryStrategy.maximumRetryAttempts"


@pytest.mark.parametrize(
    ("change", "member", "rule"),
    [
        (
            {"ResourceLimits": {**LIMITS, "MaxRuntimeInSeconds": 119}},
            _CONFIG_LIMIT,
            "greater than or equal to 120",
        ),
        (
            {"ResourceLimits": {**LIMITS, "MaxRuntimeInSeconds": 15_768_001}},
            _CONFIG_LIMIT,
            "less than or equal to 15768000",
        ),
        ({"RetryStrategy": {"MaximumRetryAttempts": 0}}, _RETRIES, "greater than or equal to 1"),
        ({"RetryStrategy": {"MaximumRetryAttempts": 31}}, _RETRIES, "less than or equal to 30"),
    ],
)
def test_values_out_of_sagemakers_ranges_are_refused_naming_the_member(
    api: TestClient,
    server: str,
    source_dir: Path,
    change: dict[str, Any],
    member: str,
    rule: str,
) -> None:
    # botocore checks some minimums itself: this client sends what it is given.
    unchecked = client("sagemaker", server, credentials(api), UNCHECKED)
    request = tuning_request(source_dir)
    if "RetryStrategy" in change:
        request["TrainingJobDefinition"].update(change)
    else:
        request["HyperParameterTuningJobConfig"].update(change)
    code, message = error_of(unchecked.create_hyper_parameter_tuning_job, **request)
    # As SageMaker words it, naming the member as its service model spells it.
    assert (code, message) == (
        "ValidationException",
        f"1 validation error detected: Value at '{member}' failed to satisfy constraint: "
        f"Member must have value {rule}",
    )
    listed = unchecked.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"]
    assert listed == []
