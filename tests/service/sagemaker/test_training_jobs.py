"""boto3's own sagemaker client against Runyard: create, describe, list, stop, the
errors SageMaker gives, and every answer checked against botocore's output shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from contract.archive import make_tarball
from contract.variables import REDACTED
from runyard.client import admin_token
from runyard.server import prepare
from service.app import create_app
from service.jobs import lifecycle
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.kit.db import session_scope, utcnow
from service.settings import Settings
from tests.conftest import make_settings
from tests.service.sagemaker.conftest import credentials
from tests.service.sagemaker.live import REGION, UNCHECKED, check_answer, client, serving

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
# An AWS Deep Learning Container's name, for a version that Runyard's image catalog has.
IMAGE = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.13.0-cpu-py311"


def request(source: Path, name: str = "wire-1", **overrides: Any) -> dict[str, Any]:
    """CreateTrainingJob as the SageMaker SDK v2's PyTorch estimator sends it."""
    body: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        },
        "HyperParameters": {
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(source.as_uri()),
            "sagemaker_container_log_level": "20",
            "sagemaker_torch_distributed_enabled": "true",
            "epochs": "3",
            "optimizer": json.dumps("adam"),
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": source.as_uri(),
                        "S3DataDistributionType": "ShardedByS3Key",
                    }
                },
                "CompressionType": "None",
            }
        ],
        "OutputDataConfig": {"S3OutputPath": (source.parent / "out").as_uri()},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "DebugHookConfig": {"S3OutputPath": "s3://bucket/debug", "CollectionConfigurations": []},
        "ProfilerConfig": {"DisableProfiler": True},
        "Environment": {"MY_SETTING": "on"},
        "Tags": [{"Key": "team", "Value": "vision"}],
    }
    body.update(overrides)
    return body


def grant_places(api: TestClient, project: str, source: Path) -> None:
    """What ``request(source)`` reads and writes, granted to ``project`` (a project other
    than default uses only what a server administrator granted it)."""
    for prefix, access in ((source, "read-only"), (source.parent / "out", "read-write")):
        answer = api.post(
            f"/v1/projects/{project}/grants", json={"prefix": prefix.as_uri(), "access": access}
        )
        assert answer.status_code == 201, answer.text


def vision_viewer_and_member(api: TestClient, server: str, source: Path) -> tuple[Any, Any]:
    """SageMaker clients of a viewer and a member of a new project "vision", granted what
    ``request(source)`` uses."""
    assert api.post("/v1/projects", json={"name": "vision"}).status_code == 201
    grant_places(api, "vision", source)
    clients = []
    for role in ("viewer", "member"):
        made = api.post("/v1/tokens", json={"name": role, "project": "vision", "role": role})
        clients.append(client("sagemaker", server, credentials(api, made.json()["token"])))
    return clients[0], clients[1]


def present(value: Any) -> Any:
    """``value`` without the keys whose value is None (modes a spec leaves unset)."""
    if isinstance(value, dict):
        return {k: present(v) for k, v in value.items() if v is not None}
    return value


def error_of(call: Any, **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_create_then_describe_answers_what_the_sdk_reads(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    created = sm.create_training_job(**request(source_dir))
    check_answer(sm, "CreateTrainingJob", created)
    assert created["TrainingJobArn"].startswith(f"arn:aws:sagemaker:{REGION}:")
    assert created["TrainingJobArn"].endswith(":training-job/wire-1")

    described = sm.describe_training_job(TrainingJobName="wire-1")
    check_answer(sm, "DescribeTrainingJob", described)
    assert described["TrainingJobArn"] == created["TrainingJobArn"]
    assert described["TrainingJobStatus"] == "InProgress"
    assert described["SecondaryStatus"] == "Starting"
    assert described["SecondaryStatusTransitions"][0]["StatusMessage"]
    assert described["ResourceConfig"]["InstanceCount"] == 2
    assert described["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600}
    assert described["HyperParameters"]["optimizer"] == '"adam"'  # as it was sent
    assert described["RoleArn"] == ROLE
    assert described["DebugHookConfig"]["S3OutputPath"] == "s3://bucket/debug"
    assert described["OutputDataConfig"]["KmsKeyId"] == ""
    assert described["ModelArtifacts"]["S3ModelArtifacts"].endswith(
        "/out/wire-1/output/model.tar.gz"
    )
    assert sm.list_tags(ResourceArn=created["TrainingJobArn"])["Tags"] == [
        {"Key": "team", "Value": "vision"}
    ]

    # The same job, seen through Runyard's own API: the spec the request became.
    job = api.get("/v1/training-jobs/wire-1").json()
    spec = job["spec"]
    assert spec["entry_point"] == "train.py"
    assert spec["source_uri"] == source_dir.as_uri()
    assert spec["image_uri"] == IMAGE
    assert spec["image"] == {
        "name": "pytorch-training:2.13.0-cpu-py311",
        "container": None,
        "note": None,
    }
    assert job["image"] == "pytorch-training:2.13.0-cpu-py311"
    assert present(spec["distribution"]) == {"torch_distributed": {"enabled": True}}
    assert spec["hyperparameters"]["epochs"] == 3
    assert spec["inputs"]["train"]["distribution"] == "ShardedByS3Key"
    assert spec["metric_definitions"] == [{"name": "loss", "regex": "loss=([0-9.]+)"}]
    assert spec["environment"] == {"MY_SETTING": "on"}


@pytest.mark.parametrize(
    ("flags", "distribution"),
    [
        (
            {
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
                "sagemaker_mpi_custom_mpi_options": json.dumps("-x NCCL_DEBUG=INFO"),
            },
            {
                "mpi": {
                    "enabled": True,
                    "processes_per_host": 2,
                    "custom_mpi_options": "-x NCCL_DEBUG=INFO",
                }
            },
        ),
        (
            {
                "sagemaker_distributed_dataparallel_enabled": "true",
                "sagemaker_instance_type": json.dumps("ml.m5.large"),
                "sagemaker_distributed_dataparallel_custom_mpi_options": json.dumps(""),
            },
            {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": ""}}},
        ),
        (
            {
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
                "sagemaker_distributed_dataparallel_enabled": "false",
                "mp_parameters": json.dumps({"partitions": 2, "microbatches": 4, "ddp": True}),
            },
            {
                "mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": ""},
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"partitions": 2, "microbatches": 4, "ddp": True},
                    }
                },
            },
        ),
        ({"sagemaker_parameter_server_enabled": "true"}, {"parameter_server": {"enabled": True}}),
        ({"sagemaker_pytorch_ddp_enabled": "true"}, {"pytorchddp": {"enabled": True}}),
    ],
)
def test_the_sdks_distribution_flags_become_the_jobs_distribution(
    sm: Any, api: TestClient, source_dir: Path, flags: dict[str, str], distribution: Any
) -> None:
    hyperparameters = {
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps(source_dir.as_uri()),
        **flags,
    }
    sm.create_training_job(**request(source_dir, HyperParameters=hyperparameters))
    spec = api.get("/v1/training-jobs/wire-1").json()["spec"]
    assert present(spec["distribution"]) == distribution


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (
            {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "0"},
            "HyperParameters.sagemaker_mpi_num_of_processes_per_host",
        ),
        # A TensorFlow mode on a PyTorch image: the flag that enabled it is named.
        (
            {"sagemaker_multi_worker_mirrored_strategy_enabled": "true"},
            "HyperParameters.sagemaker_multi_worker_mirrored_strategy_enabled",
        ),
    ],
)
def test_a_bad_distribution_flag_is_named_as_the_sdk_wrote_it(
    sm: Any, api: TestClient, source_dir: Path, flags: dict[str, str], named: str
) -> None:
    hyperparameters = {
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps(source_dir.as_uri()),
        **flags,
    }
    code, message = error_of(
        sm.create_training_job, **request(source_dir, HyperParameters=hyperparameters)
    )
    assert code == "ValidationException"
    assert named in message, message
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_a_model_stored_uncompressed_is_named_by_its_prefix(
    sm: Any, api: TestClient, source_dir: Path, settings: Settings
) -> None:
    # The SDK's disable_output_compression=True sends CompressionType NONE.
    output = {"S3OutputPath": (source_dir.parent / "out").as_uri(), "CompressionType": "NONE"}
    sm.create_training_job(**request(source_dir, OutputDataConfig=output))
    described = sm.describe_training_job(TrainingJobName="wire-1")
    check_answer(sm, "DescribeTrainingJob", described)
    assert described["OutputDataConfig"]["CompressionType"] == "NONE"
    prefix = described["ModelArtifacts"]["S3ModelArtifacts"]
    assert prefix.endswith("/out/wire-1/output/model/")
    assert api.get("/v1/training-jobs/wire-1").json()["spec"]["output_compression"] == "NONE"
    # Once stored there, Runyard's download of a model.tar.gz says where the files are.
    with session_scope(settings.database_url) as session:
        session.execute(update(TrainingJob).values(model_artifacts=prefix))
    refused = api.get("/v1/training-jobs/wire-1/model")
    assert refused.status_code == 409, refused.text
    assert prefix in refused.json()["detail"]


def test_tensorboard_output_is_the_jobs_and_echoed_as_sagemaker_describes_it(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    stored = (source_dir.parent / "tensorboard").as_uri()
    sm.create_training_job(**request(source_dir, TensorBoardOutputConfig={"S3OutputPath": stored}))
    described = sm.describe_training_job(TrainingJobName="wire-1")
    check_answer(sm, "DescribeTrainingJob", described)
    # The local path SageMaker defaults to, as its describe gives it.
    assert described["TensorBoardOutputConfig"] == {
        "S3OutputPath": stored,
        "LocalPath": "/opt/ml/output/tensorboard",
    }
    spec = api.get("/v1/training-jobs/wire-1").json()["spec"]
    assert spec["tensorboard_s3_output_path"] == stored
    # A local path that is not the job's own is named as the SDK wrote it.
    config = {"S3OutputPath": stored, "LocalPath": "/etc/tensorboard"}
    code, message = error_of(
        sm.create_training_job,
        **request(source_dir, TrainingJobName="wire-2", TensorBoardOutputConfig=config),
    )
    assert code == "ValidationException"
    assert "TensorBoardOutputConfig.LocalPath" in message, message
    assert "below /opt/ml" in message, message


def test_a_name_in_use_is_resource_in_use(sm: Any, source_dir: Path) -> None:
    sm.create_training_job(**request(source_dir))
    code, message = error_of(sm.create_training_job, **request(source_dir))
    assert code == "ResourceInUse"
    assert "wire-1" in message


def test_a_missing_job_is_requested_resource_not_found(sm: Any) -> None:
    for call in (sm.describe_training_job, sm.stop_training_job):
        assert error_of(call, TrainingJobName="nope") == (
            "ValidationException",
            "Requested resource not found.",
        )


LONG = "x" * 2501


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"TrainingJobName": "bad_name"}, "trainingJobName"),
        ({"HyperParameters": {f"k{i}": "1" for i in range(101)}}, "hyperParameters"),
        ({"HyperParameters": {"k" * 257: "1"}}, "hyperParameters.key"),
        ({"HyperParameters": {"lr": LONG}}, "hyperParameters.lr"),
        ({"Environment": {f"K{i}": "1" for i in range(101)}}, "environment"),
        ({"Environment": {"SECRET": "s" * 513}}, "environment.SECRET"),
        ({"Environment": {"1BAD": "x"}}, "environment.key"),
        ({"InputDataConfig": []}, "inputDataConfig"),
        ({"ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 0}}, "instanceCount"),
        ({"EnableManagedSpotTraining": "yes"}, "enableManagedSpotTraining"),
        (
            {"OutputDataConfig": {"S3OutputPath": "s3://b/o", "CompressionType": "ZSTD"}},
            "OutputDataConfig.CompressionType",
        ),
    ],
)
def test_every_limit_is_a_validation_exception_naming_the_member(
    api: TestClient, server: str, source_dir: Path, overrides: dict[str, Any], named: str
) -> None:
    unchecked = client("sagemaker", server, credentials(api), UNCHECKED)
    code, message = error_of(unchecked.create_training_job, **request(source_dir, **overrides))
    assert code == "ValidationException"
    assert named.lower() in message.lower()
    assert "s" * 513 not in message  # values are not repeated: they may be secrets
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_more_than_forty_metric_definitions_and_twenty_channels_are_refused(
    api: TestClient, server: str, source_dir: Path
) -> None:
    unchecked = client("sagemaker", server, credentials(api), UNCHECKED)
    algorithm = request(source_dir)["AlgorithmSpecification"]
    metrics = [{"Name": f"m{i}", "Regex": "m=([0-9]+)"} for i in range(41)]
    code, message = error_of(
        unchecked.create_training_job,
        **request(source_dir, AlgorithmSpecification={**algorithm, "MetricDefinitions": metrics}),
    )
    assert (code, "'algorithmSpecification.metricDefinitions'" in message) == (
        "ValidationException",
        True,
    )
    channel = request(source_dir)["InputDataConfig"][0]
    channels = [{**channel, "ChannelName": f"c{i}"} for i in range(21)]
    code, message = error_of(
        unchecked.create_training_job, **request(source_dir, InputDataConfig=channels)
    )
    assert (code, "'inputDataConfig'" in message) == ("ValidationException", True)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1}}, "InstanceType"),
        (
            {"AlgorithmSpecification": {"TrainingImage": "My Image!", "TrainingInputMode": "File"}},
            "TrainingImage",
        ),
        (
            {
                "AlgorithmSpecification": {
                    "TrainingImage": IMAGE.replace("2.13.0-cpu-py311", "1.8.2-cpu-py36"),
                    "TrainingInputMode": "File",
                }
            },
            "TrainingImage",
        ),
        ({"RemoteDebugConfig": {"EnableRemoteDebug": True}}, "RemoteDebugConfig"),
        ({"StoppingCondition": {"MaxPendingTimeInSeconds": 7200}}, "MaxPendingTimeInSeconds"),
        ({"HyperParameters": {"epochs": "1"}}, "sagemaker_program"),
        (
            {
                "InputDataConfig": [
                    {
                        "ChannelName": "train",
                        "DataSource": {
                            "FileSystemDataSource": {
                                "FileSystemId": "fs-12345678",
                                "FileSystemAccessMode": "ro",
                                "FileSystemType": "EFS",
                                "DirectoryPath": "/data",
                            }
                        },
                    }
                ]
            },
            "DataSource",
        ),
    ],
)
def test_what_runyard_cannot_honour_is_refused_not_dropped(
    sm: Any, api: TestClient, source_dir: Path, overrides: dict[str, Any], named: str
) -> None:
    code, message = error_of(sm.create_training_job, **request(source_dir, **overrides))
    assert code == "ValidationException"
    assert named in message
    assert api.get("/v1/training-jobs").json()["items"] == []


@pytest.mark.container_engine
def test_an_image_of_the_jobs_own_runs_as_a_container_with_or_without_a_script(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    """As the SDK's generic Estimator(image_uri=...) sends it: no sagemaker_program, the
    image's own ``train``; or a script, which SageMaker's toolkit in the image runs."""
    own = "registry.example.com/team/train:7"
    algorithm = {"TrainingImage": own, "TrainingInputMode": "File"}
    sm.create_training_job(
        **request(source_dir, AlgorithmSpecification=algorithm, HyperParameters={"epochs": "2"})
    )
    sm.create_training_job(**request(source_dir, name="wire-2", AlgorithmSpecification=algorithm))
    bare, scripted = (api.get(f"/v1/training-jobs/{n}").json() for n in ("wire-1", "wire-2"))
    assert bare["image"] == scripted["image"] == own
    assert (bare["spec"]["entry_point"], bare["spec"]["source_uri"]) == (None, None)
    assert scripted["spec"]["entry_point"] == "train.py"
    described = sm.describe_training_job(TrainingJobName="wire-1")
    assert described["AlgorithmSpecification"]["TrainingImage"] == own


@pytest.mark.parametrize(
    ("image", "framework", "runs"),
    [
        # A notebook's PyTorch 2.1, and the scikit-learn image the SDK's SKLearn names.
        (
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310",
            "pytorch",
            "pytorch-training:2.1.0-cpu-py311",
        ),
        (
            "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
            "sklearn",
            "sagemaker-scikit-learn:1.2-1-cpu-py311",
        ),
    ],
)
def test_every_training_image_sagemaker_has_is_taken_and_echoed(
    sm: Any, api: TestClient, source_dir: Path, image: str, framework: str, runs: str
) -> None:
    algorithm = {"TrainingImage": image, "TrainingInputMode": "File"}
    program = {
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps(source_dir.as_uri()),
    }
    sm.create_training_job(
        **request(source_dir, AlgorithmSpecification=algorithm, HyperParameters=program)
    )
    job = api.get("/v1/training-jobs/wire-1").json()
    assert (job["spec"]["framework"], job["image"]) == (framework, runs)
    described = sm.describe_training_job(TrainingJobName="wire-1")
    assert described["AlgorithmSpecification"]["TrainingImage"] == image


def test_the_launch_message_says_which_image_stands_in_for_the_one_named(
    sm: Any, settings: Settings, source_dir: Path
) -> None:
    """As the local backend records a stand-in when it launches (provisioning.local.
    stand_ins): the SDK prints each secondary status's message as the job goes."""
    sm.create_training_job(**request(source_dir))
    note = "torch==1.12.1 cannot be installed for Python 3.11 (...): the job runs on X"
    with session_scope(settings.database_url) as session:
        job = session.scalars(select(TrainingJob)).one()
        lifecycle.apply(job, Event.ADMITTED)
        lifecycle.apply(job, Event.LAUNCHING, "Launching 2 ml.m5.large instances")
        job.launched_image, job.launched_image_note = "pytorch-training:2.13.0-cpu-py311", note
    described = sm.describe_training_job(TrainingJobName="wire-1")
    messages = {t["Status"]: t["StatusMessage"] for t in described["SecondaryStatusTransitions"]}
    assert messages["LaunchingMLInstances"] == f"Launching 2 ml.m5.large instances. {note}"
    assert note not in messages["Starting"]


def test_list_filters_sorts_and_pages_with_botos_paginator(sm: Any, source_dir: Path) -> None:
    for name in ("alpha-1", "beta-2", "alpha-3", "gamma-4", "alpha-5"):
        sm.create_training_job(**request(source_dir, name=name))
    sm.stop_training_job(TrainingJobName="beta-2")

    every = sm.list_training_jobs(MaxResults=100)
    check_answer(sm, "ListTrainingJobs", every)
    assert [s["TrainingJobName"] for s in every["TrainingJobSummaries"]] == [
        "alpha-1",
        "beta-2",
        "alpha-3",
        "gamma-4",
        "alpha-5",
    ]
    assert "NextToken" not in every

    named = sm.list_training_jobs(NameContains="ALPHA", SortBy="Name", SortOrder="Descending")
    assert [s["TrainingJobName"] for s in named["TrainingJobSummaries"]] == [
        "alpha-5",
        "alpha-3",
        "alpha-1",
    ]
    # beta-2 never launched, so it stopped at once.
    stopped = sm.list_training_jobs(StatusEquals="Stopped")["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in stopped] == ["beta-2"]

    pages = list(
        sm.get_paginator("list_training_jobs").paginate(
            SortBy="CreationTime", SortOrder="Descending", PaginationConfig={"PageSize": 2}
        )
    )
    assert [len(page["TrainingJobSummaries"]) for page in pages] == [2, 2, 1]
    names = [s["TrainingJobName"] for page in pages for s in page["TrainingJobSummaries"]]
    assert names == ["alpha-5", "gamma-4", "alpha-3", "beta-2", "alpha-1"]

    third = every["TrainingJobSummaries"][2]["CreationTime"]
    later = sm.list_training_jobs(CreationTimeAfter=third)["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in later] == ["gamma-4", "alpha-5"]
    code, _ = error_of(sm.list_training_jobs, NextToken="not-a-token")
    assert code == "ValidationException"


def test_stop_moves_a_job_to_stopping_and_an_ended_one_is_refused(
    sm: Any, api: TestClient, source_dir: Path, settings: Settings
) -> None:
    sm.create_training_job(**request(source_dir))
    with session_scope(settings.database_url) as session:  # admitted: it has instances
        session.execute(update(TrainingJob).values(admitted_at=utcnow()))
    stopped = sm.stop_training_job(TrainingJobName="wire-1")
    assert stopped["ResponseMetadata"]["HTTPStatusCode"] == 200
    described = sm.describe_training_job(TrainingJobName="wire-1")
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == (
        "Stopping",
        "Stopping",
    )
    with session_scope(settings.database_url) as session:
        session.execute(update(TrainingJob).values(status="Completed"))
    code, message = error_of(sm.stop_training_job, TrainingJobName="wire-1")
    assert (code, message) == (
        "ValidationException",
        "The request was rejected because the training job is in status Completed.",
    )


def test_roles_and_projects_apply_to_aws_credentials(
    api: TestClient, server: str, source_dir: Path
) -> None:
    viewer, member = vision_viewer_and_member(api, server, source_dir)
    admin = client("sagemaker", server, credentials(api))

    code, message = error_of(viewer.create_training_job, **request(source_dir))
    assert (code, "member role" in message) == ("AccessDeniedException", True)
    member.create_training_job(**request(source_dir))
    assert viewer.describe_training_job(TrainingJobName="wire-1")["TrainingJobStatus"]
    # The admin token's project is "default": vision's job is not there.
    assert error_of(admin.describe_training_job, TrainingJobName="wire-1")[0] == (
        "ValidationException"
    )
    assert api.get("/v1/training-jobs/wire-1", params={"project": "vision"}).status_code == 200


def test_a_viewer_describes_and_searches_secret_looking_values_masked(
    api: TestClient, server: str, source_dir: Path
) -> None:
    viewer, member = vision_viewer_and_member(api, server, source_dir)
    environment = {"WANDB_API_KEY": "wb-1", "hf_token": "hf-2", "MY_SETTING": "on"}
    member.create_training_job(**request(source_dir, Environment=environment))
    masked = {"WANDB_API_KEY": REDACTED, "hf_token": REDACTED, "MY_SETTING": "on"}

    def found(sm: Any, **expression: str) -> list[dict[str, str]]:
        filters = {"Filters": [expression]} if expression else {}
        results = sm.search(Resource="TrainingJob", SearchExpression=filters)["Results"]
        return [result["TrainingJob"]["Environment"] for result in results]

    assert member.describe_training_job(TrainingJobName="wire-1")["Environment"] == environment
    assert viewer.describe_training_job(TrainingJobName="wire-1")["Environment"] == masked
    assert found(member) == [environment]
    assert found(viewer) == [masked]
    # A viewer's expression is tested on what it may read: no guessing a value by search.
    guess = {"Name": "Environment.hf_token", "Operator": "Equals", "Value": "hf-2"}
    assert found(member, **guess) == [environment]
    assert found(viewer, **guess) == []


def test_a_container_entrypoint_runs_instead_of_a_script(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    """As the SDK v3's ModelTrainer sends it: its driver in a channel, no script."""
    command = ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/..."]
    algorithm = {
        "TrainingImage": IMAGE,
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["/bin/bash"],
        "ContainerArguments": command,
    }
    channel = request(source_dir)["InputDataConfig"][0]
    channels = [{**channel, "ChannelName": name} for name in ("code", "sm_drivers")]
    sm.create_training_job(
        **request(
            source_dir,
            AlgorithmSpecification=algorithm,
            HyperParameters={"epochs": "2"},
            InputDataConfig=channels,
        )
    )
    spec = api.get("/v1/training-jobs/wire-1").json()["spec"]
    assert (spec["container_entrypoint"], spec["container_arguments"]) == (["/bin/bash"], command)
    assert (spec["entry_point"], spec["source_uri"]) == (None, None)
    assert sorted(spec["inputs"]) == ["code", "sm_drivers"]
    echoed = sm.describe_training_job(TrainingJobName="wire-1")["AlgorithmSpecification"]
    assert echoed["ContainerArguments"] == command

    arguments_alone = {**algorithm, "ContainerEntrypoint": []}
    del arguments_alone["ContainerEntrypoint"]
    code, message = error_of(
        sm.create_training_job,
        **request(source_dir, name="wire-2", AlgorithmSpecification=arguments_alone),
    )
    assert (code, "ContainerArguments" in message) == ("ValidationException", True)


def test_a_full_server_that_refuses_answers_resource_limit_exceeded(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    settings = make_settings(
        tmp_path / "full",
        database_url,
        backends={"ml.m5.large": "local"},
        capacity={"ml.m5.large": 2},
        on_capacity_exceeded="refuse",
    )
    with TestClient(create_app(settings)) as api, serving(create_app(settings)) as url:
        prepare(settings)
        api.headers["Authorization"] = f"Bearer {admin_token(settings.home)}"
        sm = client("sagemaker", url, credentials(api))
        sm.create_training_job(**request(source_dir))  # takes both instances
        code, message = error_of(sm.create_training_job, **request(source_dir, name="wire-2"))
        assert code == "ResourceLimitExceeded"
        assert "ml.m5.large" in message
        assert [job["name"] for job in api.get("/v1/training-jobs").json()["items"]] == ["wire-1"]


def test_an_instance_type_of_the_servers_own_configuration_is_taken(
    tmp_path: Path, database_url: str, source_dir: Path
) -> None:
    m7a = {"name": "ml.m7a.xlarge", "vcpus": 4, "memory_gib": 16}
    settings = make_settings(
        tmp_path / "own",
        database_url,
        instance_types=[m7a],
        backends={"ml.m7a.xlarge": "local"},
        capacity={"ml.m7a.xlarge": 1},
        on_capacity_exceeded="refuse",
    )
    resources = {"InstanceType": "ml.m7a.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30}
    with TestClient(create_app(settings)) as api, serving(create_app(settings)) as url:
        prepare(settings)
        api.headers["Authorization"] = f"Bearer {admin_token(settings.home)}"
        sm = client("sagemaker", url, credentials(api))
        sm.create_training_job(**request(source_dir, ResourceConfig=resources))
        described = sm.describe_training_job(TrainingJobName="wire-1")
        assert described["ResourceConfig"]["InstanceType"] == "ml.m7a.xlarge"
        # Its capacity is the configuration's too.
        again = request(source_dir, name="wire-2", ResourceConfig=resources)
        code, message = error_of(sm.create_training_job, **again)
        assert (code, "ml.m7a.xlarge" in message) == ("ResourceLimitExceeded", True)
        # A type the configuration does not add is refused, naming the member.
        other = {**resources, "InstanceType": "ml.m7a.2xlarge"}
        code, message = error_of(
            sm.create_training_job, **request(source_dir, name="wire-3", ResourceConfig=other)
        )
        assert (code, "InstanceType" in message) == ("ValidationException", True)


@pytest.mark.parametrize(
    ("channel", "expected"),
    [
        (
            {"InputMode": "FastFile", "CompressionType": "None", "ContentType": "text/csv"},
            {"input_mode": "FastFile", "content_type": "text/csv", "compression": "None"},
        ),
        (
            {"InputMode": "Pipe", "CompressionType": "Gzip"},
            {"input_mode": "Pipe", "compression": "Gzip"},
        ),
        ({}, {"input_mode": "File", "compression": "None"}),
    ],
)
def test_channels_keep_their_mode_compression_and_type(
    sm: Any, api: TestClient, source_dir: Path, channel: dict[str, str], expected: Any
) -> None:
    base = request(source_dir)["InputDataConfig"][0]
    manifest = {"S3DataType": "ManifestFile", "S3Uri": (source_dir / "train.py").as_uri()}
    given = {**base, **channel, "DataSource": {"S3DataSource": manifest}}
    if not channel:
        del given["CompressionType"]
    sm.create_training_job(**request(source_dir, InputDataConfig=[given]))
    train = api.get("/v1/training-jobs/wire-1").json()["spec"]["inputs"]["train"]
    assert {key: train.get(key) for key in expected} == expected
    assert (train["s3_data_type"], train["distribution"]) == ("ManifestFile", "FullyReplicated")


# Where the SageMaker SDK says the code is when it ships it as a channel (with network
# isolation): a path on the instance, in the channel it names ``code``.
CODE_IN_CHANNEL = "/opt/ml/input/data/code/sourcedir.tar.gz"


def _code_channel(tarball: Path) -> dict[str, Any]:
    """The ``code`` channel the SDK adds for the tarball it uploaded."""
    return {
        "ChannelName": "code",
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": tarball.as_uri(),
                "S3DataDistributionType": "FullyReplicated",
            }
        },
    }


def _isolated_request(source_dir: Path, submit_directory: str, **overrides: Any) -> dict[str, Any]:
    """CreateTrainingJob as the SDK's PyTorch estimator sends it with
    enable_network_isolation=True: the code in a channel, named by its instance path."""
    tarball = make_tarball(source_dir, source_dir.parent / "upload" / "sourcedir.tar.gz")
    body = request(source_dir, EnableNetworkIsolation=True, **overrides)
    body["HyperParameters"]["sagemaker_submit_directory"] = json.dumps(submit_directory)
    body["InputDataConfig"].append(_code_channel(tarball))
    return body


def test_network_isolation_ships_the_code_in_a_channel_as_the_sdk_sends_it(
    sm: Any, api: TestClient, source_dir: Path
) -> None:
    sm.create_training_job(**_isolated_request(source_dir, CODE_IN_CHANNEL))
    sm.create_training_job(**request(source_dir, name="wire-2"))
    isolated = sm.describe_training_job(TrainingJobName="wire-1")
    check_answer(sm, "DescribeTrainingJob", isolated)
    assert isolated["EnableNetworkIsolation"] is True
    assert isolated["HyperParameters"]["sagemaker_submit_directory"] == json.dumps(CODE_IN_CHANNEL)
    assert sm.describe_training_job(TrainingJobName="wire-2")["EnableNetworkIsolation"] is False
    spec = api.get("/v1/training-jobs/wire-1").json()["spec"]
    assert spec["enable_network_isolation"] is True
    assert spec["source_uri"] == CODE_IN_CHANNEL
    assert sorted(spec["inputs"]) == ["code", "train"]
    assert api.get("/v1/training-jobs/wire-2").json()["spec"]["enable_network_isolation"] is False


@pytest.mark.parametrize(
    ("submit_directory", "message"),
    [
        # A path on the instance, but not in a channel.
        ("/opt/ml/code/sourcedir.tar.gz", "a path must name a file in one of the job's channels"),
        ("src/sourcedir.tar.gz", "a path must name a file in one of the job's channels"),
        ("/opt/ml/input/data/../code/x.tar.gz", "a path must name a file in one of the job's"),
        # In a channel the job does not have, or that holds no such file.
        ("/opt/ml/input/data/model/sourcedir.tar.gz", "'model', which is not one of the job's"),
        ("/opt/ml/input/data/code/other.tar.gz", "channel 'code' (file://"),
    ],
)
def test_a_submit_directory_on_the_instance_must_be_a_file_of_a_channel(
    sm: Any, api: TestClient, source_dir: Path, submit_directory: str, message: str
) -> None:
    code, said = error_of(sm.create_training_job, **_isolated_request(source_dir, submit_directory))
    assert code == "ValidationException"
    assert said.startswith("HyperParameters.sagemaker_submit_directory: "), said
    assert message in said
    assert api.get("/v1/training-jobs").json()["items"] == []


def test_the_code_a_channel_brings_must_hold_the_entry_point(sm: Any, source_dir: Path) -> None:
    body = _isolated_request(source_dir, CODE_IN_CHANNEL)
    body["HyperParameters"]["sagemaker_program"] = json.dumps("missing.py")
    code, said = error_of(sm.create_training_job, **body)
    assert code == "ValidationException"
    assert "missing.py is not a file in file://" in said
    assert said.endswith("sourcedir.tar.gz")
