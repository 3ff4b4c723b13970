"""boto3's own sagemaker client against Runyard's tuning jobs: create, describe, list,
list the trials, stop, the errors SageMaker gives, and every answer checked against
botocore's output shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.sagemaker.live import REGION, check_answer
from tests.service.sagemaker.test_training_jobs import IMAGE, ROLE
from tests.service.tuning.tuning import advance, end_job, report, training_jobs


def tuning_request(source: Path, name: str = "tune-1", **config: Any) -> dict[str, Any]:
    """CreateHyperParameterTuningJob as the SageMaker SDK v2's HyperparameterTuner sends it
    for a PyTorch estimator."""
    tuning_config: dict[str, Any] = {
        "Strategy": "Random",
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2},
        "TrainingJobEarlyStoppingType": "Off",
        "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
        "ParameterRanges": {
            "ContinuousParameterRanges": [
                {"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}
            ],
            "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ['"adam"', '"sgd"']}],
            "IntegerParameterRanges": [
                {"Name": "layers", "MinValue": "1", "MaxValue": "4", "ScalingType": "Auto"}
            ],
        },
        "RandomSeed": 7,
    }
    tuning_config.update(config)
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": tuning_config,
        "TrainingJobDefinition": {
            "StaticHyperParameters": {
                "sagemaker_program": json.dumps("train.py"),
                "sagemaker_submit_directory": json.dumps(source.as_uri()),
                "sagemaker_container_log_level": "20",
                "epochs": "3",
            },
            "AlgorithmSpecification": {
                "TrainingImage": IMAGE,
                "TrainingInputMode": "File",
                "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
            },
            "RoleArn": ROLE,
            "OutputDataConfig": {"S3OutputPath": (source.parent / "out").as_uri()},
            "HyperParameterTuningResourceConfig": {
                "InstanceType": "ml.m5.large",
                "InstanceCount": 1,
                "VolumeSizeInGB": 30,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        },
    }


def error_of(call: Any, **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_the_sdks_request_creates_a_tuning_job_whose_trials_show_as_sagemaker_shows_them(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    created = sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir))
    check_answer(sm, "CreateHyperParameterTuningJob", created)
    assert created["HyperParameterTuningJobArn"].startswith(f"arn:aws:sagemaker:{REGION}:")
    assert created["HyperParameterTuningJobArn"].endswith(":hyper-parameter-tuning-job/tune-1")

    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "InProgress"
    assert described["HyperParameterTuningJobConfig"]["RandomSeed"] == 7
    assert described["TrainingJobDefinition"]["RoleArn"] == ROLE
    # SageMaker adds the objective's name to the static hyperparameters (the SDK's
    # HyperparameterTuner.attach takes it out again) and to each trial's.
    statics = described["TrainingJobDefinition"]["StaticHyperParameters"]
    assert statics["_tuning_objective_metric"] == '"loss"'
    # The instances as ResourceConfig too, as the SDK's attach reads them.
    assert described["TrainingJobDefinition"]["ResourceConfig"] == {
        "InstanceType": "ml.m5.large",
        "InstanceCount": 1,
        "VolumeSizeInGB": 30,
    }
    assert "BestTrainingJob" not in described

    advance(settings)
    trials = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-1"
    )
    check_answer(sm, "ListTrainingJobsForHyperParameterTuningJob", trials)
    summaries = trials["TrainingJobSummaries"]
    assert len(summaries) == 2
    for summary in summaries:
        tuned = summary["TunedHyperParameters"]
        assert set(tuned) == {"lr", "optimizer", "layers"}
        # As the request's values were written: the SDK's JSON strings stay so.
        assert tuned["optimizer"] in ('"adam"', '"sgd"')
        assert 0.001 <= float(tuned["lr"]) <= 0.1
        assert tuned["layers"] in ("1", "2", "3", "4")
        assert (summary["TrainingJobStatus"], summary["ObjectiveStatus"]) == (
            "InProgress",
            "Pending",
        )
        # The trial's own training job, as DescribeTrainingJob shows it.
        job = sm.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        check_answer(sm, "DescribeTrainingJob", job)
        assert job["HyperParameters"]["epochs"] == "3"
        assert job["HyperParameters"]["_tuning_objective_metric"] == '"loss"'
        assert job["HyperParameters"]["optimizer"] == tuned["optimizer"]
        assert job["RoleArn"] == ROLE
        assert job["ResourceConfig"]["InstanceType"] == "ml.m5.large"
    job_hyperparameters = {j["name"]: j["hyperparameters"] for j in training_jobs(settings)}
    first = summaries[0]["TrainingJobName"]
    # The script gets the values decoded, as every SageMaker hyperparameter.
    assert job_hyperparameters[first]["optimizer"] in ("adam", "sgd")
    assert job_hyperparameters[first]["epochs"] == 3

    end_job(settings, first, loss=0.125)
    end_job(settings, summaries[1]["TrainingJobName"], status="Failed")
    advance(settings)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["TrainingJobStatusCounters"] == {
        "Completed": 1,
        "InProgress": 1,
        "RetryableError": 0,
        "NonRetryableError": 1,
        "Stopped": 0,
    }
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 1, "Pending": 1, "Failed": 1}
    best = described["BestTrainingJob"]
    assert best["TrainingJobName"] == first
    assert best["FinalHyperParameterTuningJobObjectiveMetric"] == {
        "Type": "Minimize",
        "MetricName": "loss",
        "Value": 0.125,
    }

    by_objective = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-1", SortBy="FinalObjectiveMetricValue"
    )["TrainingJobSummaries"]
    assert by_objective[0]["TrainingJobName"] == first
    failed = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-1", StatusEquals="Failed"
    )["TrainingJobSummaries"]
    assert [(s["TrainingJobStatus"], s["ObjectiveStatus"]) for s in failed] == [
        ("Failed", "Failed")
    ]
    assert failed[0]["FailureReason"] == "AlgorithmError: the script failed"

    for summary in sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-1"
    )["TrainingJobSummaries"]:
        if summary["TrainingJobStatus"] == "InProgress":
            end_job(settings, summary["TrainingJobName"], loss=0.5)
    advance(settings)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert "HyperParameterTuningEndTime" in described


def test_a_page_of_trials_and_of_tuning_jobs_at_a_time(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    for name in ("tune-a", "tune-b", "tune-c"):
        sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir, name))
    listed = sm.list_hyper_parameter_tuning_jobs(MaxResults=2, SortBy="Name")
    check_answer(sm, "ListHyperParameterTuningJobs", listed)
    names = [s["HyperParameterTuningJobName"] for s in listed["HyperParameterTuningJobSummaries"]]
    assert names == ["tune-a", "tune-b"]
    rest = sm.list_hyper_parameter_tuning_jobs(
        MaxResults=2, SortBy="Name", NextToken=listed["NextToken"]
    )
    assert [s["HyperParameterTuningJobName"] for s in rest["HyperParameterTuningJobSummaries"]] == [
        "tune-c"
    ]
    assert "NextToken" not in rest
    summary = listed["HyperParameterTuningJobSummaries"][0]
    assert summary["Strategy"] == "Random"
    assert summary["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2}
    newest = sm.list_hyper_parameter_tuning_jobs(SortOrder="Descending", NameContains="TUNE-C")
    assert [
        s["HyperParameterTuningJobName"] for s in newest["HyperParameterTuningJobSummaries"]
    ] == ["tune-c"]

    advance(settings, "tune-a")
    page = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-a", MaxResults=1
    )
    following = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="tune-a", MaxResults=1, NextToken=page["NextToken"]
    )
    assert "NextToken" not in following
    shown = [s["TrainingJobName"] for s in page["TrainingJobSummaries"]]
    shown += [s["TrainingJobName"] for s in following["TrainingJobSummaries"]]
    assert sorted(shown) == sorted(j["name"] for j in training_jobs(settings))
    code, message = error_of(
        sm.list_training_jobs_for_hyper_parameter_tuning_job,
        HyperParameterTuningJobName="tune-b",
        NextToken=page["NextToken"],
    )
    assert (code, message) == (
        "ValidationException",
        "NextToken: not a token this server gave for this listing",
    )


def test_stop_stops_the_trials_and_ends_the_tuning_job_stopped(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir))
    advance(settings)
    stopped = sm.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert set(stopped) == {"ResponseMetadata"}  # the operation answers nothing else
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert described["HyperParameterTuningJobStatus"] == "Stopping"
    advance(settings)
    advance(settings)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    assert described["TrainingJobStatusCounters"]["Stopped"] == 2
    code, message = error_of(
        sm.stop_hyper_parameter_tuning_job, HyperParameterTuningJobName="tune-1"
    )
    assert (code, message) == (
        "ValidationException",
        "The request was rejected because the tuning job is in status Stopped.",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"Strategy": "Hyperband", "TrainingJobEarlyStoppingType": "Auto"},
            "HyperParameterTuningJobConfig.TrainingJobEarlyStoppingType: must be Off with "
            "Hyperband, which stops trials",
        ),
        (
            {"StrategyConfig": {"HyperbandStrategyConfig": {"MaxResource": 3}}},
            "HyperParameterTuningJobConfig.StrategyConfig: only for the Hyperband strategy: "
            "give none",
        ),
        (
            {
                "Strategy": "Hyperband",
                "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 4, "MaxResource": 3}},
            },
            "HyperParameterTuningJobConfig.StrategyConfig.HyperbandStrategyConfig.MaxResource: "
            "must be at least the minimum resource",
        ),
        (
            {
                "Strategy": "Hyperband",
                "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 4}},
            },
            "HyperParameterTuningJobConfig.StrategyConfig.HyperbandStrategyConfig.MaxResource: "
            "3 (from the static hyperparameters) is below the minimum resource 4",
        ),
        (
            {"HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "acc"}},
            "HyperParameterTuningJobConfig.HyperParameterTuningJobObjective.MetricName: "
            "'acc' is not one of the training job's metric_definitions ('loss')",
        ),
        (
            {
                "ParameterRanges": {
                    "ContinuousParameterRanges": [
                        {"Name": "lr", "MinValue": "small", "MaxValue": "0.1"}
                    ]
                }
            },
            "HyperParameterTuningJobConfig.ParameterRanges.ContinuousParameterRanges.1.MinValue: "
            "not a number",
        ),
        (
            {
                "ParameterRanges": {
                    "IntegerParameterRanges": [{"Name": "epochs", "MinValue": "1", "MaxValue": "3"}]
                }
            },
            "TrainingJobDefinition.StaticHyperParameters.epochs: is tuned: give it as a "
            "range, not as a static hyperparameter",
        ),
    ],
)
def test_what_runyard_cannot_run_is_refused_naming_the_member(
    sm: Any, source_dir: Path, change: dict[str, Any], message: str
) -> None:
    code, said = error_of(
        sm.create_hyper_parameter_tuning_job, **tuning_request(source_dir, **change)
    )
    assert (code, said) == ("ValidationException", message)
    assert sm.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"] == []


def test_a_training_job_definition_the_server_cannot_run_is_refused_naming_its_member(
    sm: Any, source_dir: Path
) -> None:
    request = tuning_request(source_dir)
    request["TrainingJobDefinition"]["HyperParameterTuningResourceConfig"]["InstanceType"] = (
        "ml.p4d.24xlarge"
    )
    code, message = error_of(sm.create_hyper_parameter_tuning_job, **request)
    assert code == "ValidationException"
    assert message.startswith(
        "TrainingJobDefinition.ResourceConfig.InstanceType: no backend on this server runs "
        "ml.p4d.24xlarge"
    ), message


def test_names_in_use_and_unknown_names_answer_as_sagemaker(sm: Any, source_dir: Path) -> None:
    sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir))
    code, message = error_of(sm.create_hyper_parameter_tuning_job, **tuning_request(source_dir))
    assert code == "ResourceInUse"
    assert "a tuning job named tune-1 already exists" in message
    code, message = error_of(
        sm.describe_hyper_parameter_tuning_job, HyperParameterTuningJobName="nope"
    )
    assert (code, message) == ("ValidationException", "Requested resource not found.")


def test_a_tuning_job_created_over_rest_describes_over_the_wire(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    from tests.service.tuning.tuning import tuning_spec

    spec = tuning_spec(source_dir)
    spec["training_job"]["instance_type"] = "ml.m5.large"
    assert api.post("/v1/tuning-jobs", json=spec).status_code == 201
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    config = described["HyperParameterTuningJobConfig"]
    assert config["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2}
    assert config["ParameterRanges"]["CategoricalParameterRanges"] == [
        {"Name": "optimizer", "Values": ['"adam"', '"sgd"']}
    ]
    definition = described["TrainingJobDefinition"]
    assert definition["StaticHyperParameters"] == {
        "_tuning_objective_metric": '"loss"',
        "epochs": "2",
    }
    assert definition["ResourceConfig"]["InstanceType"] == "ml.m5.large"

    # Hyperband's resources, MaxResource read from the static epochs, as a request's.
    spec.update(name="tune-2", strategy="Hyperband")
    spec["strategy_config"] = {"hyperband_strategy_config": {"min_resource": 1}}
    assert api.post("/v1/tuning-jobs", json=spec).status_code == 201
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-2")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    config = described["HyperParameterTuningJobConfig"]
    assert (config["Strategy"], config["TrainingJobEarlyStoppingType"]) == ("Hyperband", "Off")
    assert config["StrategyConfig"] == {
        "HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 2}
    }


def trial_summaries(sm: Any, name: str = "tune-1") -> list[dict[str, Any]]:
    answer = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name, SortBy="CreationTime"
    )
    check_answer(sm, "ListTrainingJobsForHyperParameterTuningJob", answer)
    return list(answer["TrainingJobSummaries"])


def test_a_trial_stopped_early_shows_stopped_with_its_last_objective_as_sagemaker_shows_it(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    limits = {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 3}
    request = tuning_request(source_dir, ResourceLimits=limits, TrainingJobEarlyStoppingType="Auto")
    sm.create_hyper_parameter_tuning_job(**request)
    advance(settings)
    for summary in trial_summaries(sm):
        report(settings, summary["TrainingJobName"], [0.1, 0.1, 0.1, 2.0])
        end_job(settings, summary["TrainingJobName"])
    advance(settings)
    last = trial_summaries(sm)[3]["TrainingJobName"]
    report(settings, last, [0.5, 0.4, 0.3])  # over the median running average, 0.1
    advance(settings)
    advance(settings)

    summary = trial_summaries(sm)[3]
    assert (summary["TrainingJobStatus"], summary["ObjectiveStatus"]) == ("Stopped", "Succeeded")
    assert "median stopping rule" in summary["FailureReason"]
    assert summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == 0.3
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] == "Auto"
    assert described["TrainingJobStatusCounters"]["Stopped"] == 1
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 4, "Pending": 0, "Failed": 0}
    # Its last value (0.3) beats the others' final 2.0.
    assert described["BestTrainingJob"]["TrainingJobName"] == last
    job = sm.describe_training_job(TrainingJobName=last)
    assert job["TrainingJobStatus"] == "Stopped"


def test_hyperband_over_the_wire_stops_a_trial_at_max_resource(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    config = {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 2}}
    sm.create_hyper_parameter_tuning_job(
        **tuning_request(source_dir, Strategy="Hyperband", StrategyConfig=config)
    )
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobConfig"]["StrategyConfig"] == config
    advance(settings)
    first = trial_summaries(sm)[0]["TrainingJobName"]
    report(settings, first, [0.5, 0.4])
    advance(settings)
    advance(settings)
    summary = trial_summaries(sm)[0]
    assert (summary["TrainingJobStatus"], summary["ObjectiveStatus"]) == ("Stopped", "Succeeded")
    assert summary["FailureReason"] == "Stopped by Hyperband: it reached MaxResource (2 steps)"


def _warm_start(kind: str, *parents: str) -> dict[str, Any]:
    return {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": p} for p in parents],
        "WarmStartType": kind,
    }


def test_a_warm_start_over_the_wire_names_the_overall_best_of_it_and_its_parents(
    sm: Any, api: TestClient, settings: Settings, source_dir: Path
) -> None:
    sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir))
    advance(settings)
    for summary, loss in zip(trial_summaries(sm), (0.4, 0.2), strict=True):
        end_job(settings, summary["TrainingJobName"], loss=loss)
    advance(settings)
    (third,) = [s for s in trial_summaries(sm) if s["TrainingJobStatus"] == "InProgress"]
    end_job(settings, third["TrainingJobName"], loss=0.3)
    advance(settings)
    best = min(
        trial_summaries(sm), key=lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    )

    warm = _warm_start("IdenticalDataAndAlgorithm", "tune-1")
    sm.create_hyper_parameter_tuning_job(
        **tuning_request(source_dir, "tune-2"), WarmStartConfig=warm
    )
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-2")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["WarmStartConfig"] == warm
    assert "BestTrainingJob" not in described
    overall = described["OverallBestTrainingJob"]
    assert (overall["TuningJobName"], overall["TrainingJobName"]) == (
        "tune-1",
        best["TrainingJobName"],
    )
    assert overall["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == 0.2

    # Created over REST, described as SageMaker's request would have given it; with
    # TransferLearning there is no overall best (its parents trained on other data).
    from tests.service.tuning.tuning import tuning_spec

    spec = tuning_spec(source_dir, name="tune-3")
    spec["training_job"]["hyperparameters"] = {
        "sagemaker_program": "train.py",
        "sagemaker_container_log_level": 20,
        "_tuning_objective_metric": "loss",
        "epochs": 3,
        "layers": 2,  # tuned by the parent: as many hyperparameters in all as it has
        "batch": 32,
    }
    spec["warm_start_config"] = {
        "warm_start_type": "TransferLearning",
        "parent_tuning_jobs": ["tune-1"],
    }
    created = api.post("/v1/tuning-jobs", json=spec)
    assert created.status_code == 201, created.text
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-3")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert described["WarmStartConfig"] == _warm_start("TransferLearning", "tune-1")
    assert "OverallBestTrainingJob" not in described


def test_a_warm_start_from_no_such_parent_is_refused_naming_the_member(
    sm: Any, source_dir: Path
) -> None:
    request = tuning_request(source_dir, "tune-2")
    warm = _warm_start("IdenticalDataAndAlgorithm", "tune-9")
    code, said = error_of(sm.create_hyper_parameter_tuning_job, **request, WarmStartConfig=warm)
    assert (code, said) == (
        "ValidationException",
        "WarmStartConfig.ParentHyperParameterTuningJobs.1.HyperParameterTuningJobName: no "
        "tuning job named 'tune-9' in project 'default'",
    )
    assert sm.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"] == []


def test_a_tuning_jobs_tags_are_its_trials_training_jobs_tags(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    tags = [{"Key": "team", "Value": "vision"}]
    sm.create_hyper_parameter_tuning_job(**tuning_request(source_dir), Tags=tags)
    advance(settings)
    for summary in trial_summaries(sm):
        assert sm.list_tags(ResourceArn=summary["TrainingJobArn"])["Tags"] == tags


def several_definitions(source: Path) -> dict[str, Any]:
    """CreateHyperParameterTuningJob as the SDK's ``HyperparameterTuner.create`` sends it
    for two estimators: no objective or ranges in the configuration, each definition
    named with its own."""
    request = tuning_request(source)
    config = request["HyperParameterTuningJobConfig"]
    objective = config.pop("HyperParameterTuningJobObjective")
    ranges = config.pop("ParameterRanges")
    one = request.pop("TrainingJobDefinition")
    other = json.loads(json.dumps(one))
    other["StaticHyperParameters"]["epochs"] = "5"
    other["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "error", "Regex": "error=([0-9.]+)"}
    ]
    request["TrainingJobDefinitions"] = [
        {
            **one,
            "DefinitionName": "mlp",
            "TuningObjective": objective,
            "HyperParameterRanges": ranges,
        },
        {
            **other,
            "DefinitionName": "tree",
            "TuningObjective": {"Type": "Minimize", "MetricName": "error"},
            "HyperParameterRanges": {
                "IntegerParameterRanges": [{"Name": "depth", "MinValue": "2", "MaxValue": "9"}],
                "CategoricalParameterRanges": [{"Name": "kind", "Values": ['"gini"', '"entropy"']}],
                "ContinuousParameterRanges": [],
            },
        },
    ]
    config["ResourceLimits"] = {"MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 6}
    return request


def test_several_training_job_definitions_each_run_their_trials_and_name_them(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    sm.create_hyper_parameter_tuning_job(**several_definitions(source_dir))
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert "TrainingJobDefinition" not in described
    echoed = {d["DefinitionName"]: d for d in described["TrainingJobDefinitions"]}
    # As the SDK's attach reads each: its objective's name among its statics, its
    # instances as ResourceConfig.
    assert echoed["tree"]["StaticHyperParameters"]["_tuning_objective_metric"] == '"error"'
    assert echoed["mlp"]["StaticHyperParameters"]["_tuning_objective_metric"] == '"loss"'
    assert echoed["tree"]["ResourceConfig"]["InstanceType"] == "ml.m5.large"

    advance(settings)
    summaries = trial_summaries(sm)
    assert len(summaries) == 6
    assert {s["TrainingJobDefinitionName"] for s in summaries} == {"mlp", "tree"}
    jobs = {job["name"]: job for job in training_jobs(settings)}
    for summary in summaries:
        tuned = summary["TunedHyperParameters"]
        job = sm.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        check_answer(sm, "DescribeTrainingJob", job)
        if summary["TrainingJobDefinitionName"] == "tree":
            assert set(tuned) == {"depth", "kind"}
            assert tuned["kind"] in ('"gini"', '"entropy"')  # as the request wrote it
            assert job["HyperParameters"]["epochs"] == "5"
            assert job["HyperParameters"]["_tuning_objective_metric"] == '"error"'
            assert job["AlgorithmSpecification"]["MetricDefinitions"][0]["Name"] == "error"
        else:
            assert set(tuned) == {"lr", "optimizer", "layers"}
            assert job["HyperParameters"]["epochs"] == "3"
        assert jobs[summary["TrainingJobName"]]["hyperparameters"]["epochs"] in (3, 5, "3", "5")

    tree = next(s for s in summaries if s["TrainingJobDefinitionName"] == "tree")
    report(settings, tree["TrainingJobName"], [0.3], metric="error")
    end_job(settings, tree["TrainingJobName"])
    advance(settings)
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    best = described["BestTrainingJob"]
    assert (best["TrainingJobName"], best["TrainingJobDefinitionName"]) == (
        tree["TrainingJobName"],
        "tree",
    )
    assert best["FinalHyperParameterTuningJobObjectiveMetric"] == {
        "Type": "Minimize",
        "MetricName": "error",
        "Value": 0.3,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["HyperParameterTuningJobConfig"].update(
                HyperParameterTuningJobObjective={"Type": "Minimize", "MetricName": "loss"}
            ),
            "HyperParameterTuningJobConfig.HyperParameterTuningJobObjective: with "
            "TrainingJobDefinitions, each definition gives its TuningObjective",
        ),
        (
            lambda r: r["TrainingJobDefinitions"][1]["TuningObjective"].update(MetricName="loss"),
            "TrainingJobDefinitions.2.TuningObjective.MetricName: 'loss' is not one of the "
            "training job's metric_definitions ('error')",
        ),
        (
            lambda r: r["TrainingJobDefinitions"][1]["HyperParameterRanges"][
                "IntegerParameterRanges"
            ][0].update(MinValue="two"),
            "TrainingJobDefinitions.2.HyperParameterRanges.IntegerParameterRanges.1.MinValue: "
            "not an integer",
        ),
        (
            lambda r: r["TrainingJobDefinitions"][0]["HyperParameterTuningResourceConfig"].update(
                InstanceType="ml.p4d.24xlarge"
            ),
            "TrainingJobDefinitions.1.ResourceConfig.InstanceType: no backend on this server "
            "runs ml.p4d.24xlarge",
        ),
        (
            lambda r: r["HyperParameterTuningJobConfig"].update(Strategy="Grid"),
            "HyperParameterTuningJobConfig.Strategy: the Grid strategy tunes one training job",
        ),
        (
            lambda r: r.update(TrainingJobDefinition=r["TrainingJobDefinitions"][0]),
            "TrainingJobDefinitions: give TrainingJobDefinition or TrainingJobDefinitions, "
            "not both",
        ),
    ],
)
def test_several_definitions_that_break_a_rule_are_refused_naming_the_member(
    sm: Any, source_dir: Path, change: Any, message: str
) -> None:
    request = several_definitions(source_dir)
    change(request)
    code, said = error_of(sm.create_hyper_parameter_tuning_job, **request)
    assert code == "ValidationException"
    assert said.startswith(message), said
    assert sm.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"] == []


def test_several_definitions_created_over_rest_describe_over_the_wire(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    from tests.service.tuning.test_definitions import two_definitions

    spec = two_definitions(source_dir)
    assert api.post("/v1/tuning-jobs", json=spec).status_code == 201, spec
    described = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-1")
    check_answer(sm, "DescribeHyperParameterTuningJob", described)
    assert "ParameterRanges" not in described["HyperParameterTuningJobConfig"]
    tree = described["TrainingJobDefinitions"][1]
    assert tree["DefinitionName"] == "tree"
    assert tree["TuningObjective"] == {"Type": "Minimize", "MetricName": "error"}
    assert tree["HyperParameterRanges"]["IntegerParameterRanges"] == [
        {"Name": "depth", "MinValue": "2", "MaxValue": "9", "ScalingType": "Auto"}
    ]
    assert tree["StaticHyperParameters"]["_tuning_objective_metric"] == '"error"'
