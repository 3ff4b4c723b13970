"""The SageMaker Python SDK itself (v2's PyTorch estimator), pointed at Runyard with only
endpoints and credentials changed: ``fit(logs=True)`` trains on Runyard's instances,
prints every host's lines, and leaves the model on S3 (moto's server).

The SDK runs in a virtual environment of its own (``tests/e2e/sdk_venvs.py``), as a
notebook would, with nothing of Runyard's on its path."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.aws import MotoServer
from tests.e2e.conftest import EXAMPLES, Stack
from tests.e2e.sdk_venvs import sdk_python
from tests.service.sagemaker.live import check_answer
from tests.timeouts import scaled

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent / "sagemaker_sdk"
BUCKET = "runyard-sdk"
REGION = "us-east-1"
# Under the test's own timeout (300 s), so that a script that hangs says why.
FIT_TIMEOUT = 240
# What a user sets to point the SDK at Runyard: "Use your SageMaker code" in
# docs/sagemaker.md.
SDK_CONFIG = """\
SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
"""


@pytest.fixture(scope="module")
def s3(moto: MotoServer) -> MotoServer:
    moto.reset()
    moto.client("s3").create_bucket(Bucket=BUCKET)
    return moto


@pytest.fixture(scope="module")
def sdk_stack(tmp_path_factory: pytest.TempPathFactory, s3: MotoServer) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-sdk")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    # The server reaches S3 (moto) through boto3's standard settings, and runs the
    # ml.* type the SDK names on the local backend.
    stack.env.update(s3.client_env())
    stack.env["RUNYARD_BACKENDS"] = "local=local,ml.m5.large=local"
    # The Deep Learning Container the notebook names (PyTorch 2.1) is taken as it is: the
    # catalog makes its image for the server's Python (tests/service/sagemaker has it).
    # The alias runs it on the built-in image instead, sparing these tests the build of
    # torch 2.1 with its CUDA libraries (about 2.5 GB).
    stack.env["RUNYARD_IMAGE_ALIASES"] = '{"pytorch:2.1": "builtin"}'
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


def sdk_environment(stack: Stack, s3: MotoServer) -> dict[str, str]:
    """A notebook's environment pointed at Runyard: the settings docs/sagemaker.md gives."""
    with stack.client() as client:
        keys = client.aws_credentials()
    config = stack.home / "sagemaker-sdk.yaml"
    config.write_text(SDK_CONFIG)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RUNYARD_"))},
        "AWS_ACCESS_KEY_ID": keys["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": keys["secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL_SAGEMAKER": stack.url,
        "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": stack.url,
        "AWS_ENDPOINT_URL_S3": s3.url,
        "SAGEMAKER_USER_CONFIG_OVERRIDE": str(config),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        # v3 checks the role against IAM before it trains; there is no IAM here.
        "SAGEMAKER_VALIDATE_ROLE": "false",
    }


def run_sdk(stack: Stack, s3: MotoServer, generation: str, script: str, *args: str) -> str:
    """Runs one of the scripts beside this file under the SDK's own interpreter; returns
    what it printed."""
    bound = scaled(FIT_TIMEOUT)
    try:
        done = subprocess.run(
            [str(sdk_python(generation)), str(HERE / script), *args],
            env=sdk_environment(stack, s3),
            capture_output=True,
            text=True,
            timeout=bound,
        )
    except subprocess.TimeoutExpired as exc:
        # Before the test's own timeout, so that what the server did is said.
        printed = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (exc.stdout, exc.stderr)
        )
        # The unfinished jobs last: what a report that keeps only the tail shows.
        pytest.fail(f"{script} ran {bound:.0f} s\n{printed[-4000:]}\n{stack.unfinished()}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{output}\n{stack.diagnostics()}"
    return output


def fit(stack: Stack, s3: MotoServer, source: Path, entry_point: str, distribution: Any) -> str:
    arguments = [str(source), entry_point, "2", json.dumps(distribution), BUCKET]
    return run_sdk(stack, s3, "v2", "fit_v2.py", *arguments)


def result_of(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("result "))
    return dict(json.loads(line.removeprefix("result ")))


def reports(output: str, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(line.split(prefix, 1)[1]) for line in output.splitlines() if prefix in line]


def model_stored(s3: MotoServer, uri: str) -> bool:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return int(s3.client("s3").head_object(Bucket=bucket, Key=key)["ContentLength"]) > 0


def test_pytorch_estimator_fit_trains_with_torch_distributed_on_two_instances(
    sdk_stack: Stack, s3: MotoServer
) -> None:
    output = fit(
        sdk_stack, s3, HERE / "torch_job", "train.py", {"torch_distributed": {"enabled": True}}
    )
    ranks = sorted(reports(output, "rank "), key=lambda r: r["rank"])
    # Both hosts' lines reached the SDK's log printer.
    assert [(r["rank"], r["world"], r["sum"]) for r in ranks] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert {r["host"] for r in ranks} == {"algo-1", "algo-2"}
    result = result_of(output)
    assert result["status"] == "Completed"
    assert result["model_data"].startswith(f"s3://{BUCKET}/{result['name']}/output/")
    assert result["attached_model_data"] == result["model_data"]
    assert result["attached_instance_count"] == 2
    assert model_stored(s3, result["model_data"])
    # The SDK's TensorBoardOutputConfig: each rank's file, where the SDK says they are.
    tensorboard = result["tensorboard"]
    assert tensorboard == f"s3://{BUCKET}/tensorboard/{result['name']}/tensorboard-output"
    prefix = tensorboard.removeprefix(f"s3://{BUCKET}/")
    listed = s3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
    assert sorted(item["Key"] for item in listed.get("Contents", [])) == [
        f"{prefix}/rank-0.txt",
        f"{prefix}/rank-1.txt",
    ]
    with sdk_stack.client() as client:
        job = client.get_job(result["name"])
    assert job["spec"]["distribution"]["torch_distributed"] == {"enabled": True}
    assert (job["attempt"], job["restarts"]) == (0, 0)


def test_a_channel_with_nothing_under_it_fails_the_job_at_its_download(
    sdk_stack: Stack, s3: MotoServer
) -> None:
    # As SageMaker does: CreateTrainingJob takes the channel, the instance finds it empty.
    output = run_sdk(
        sdk_stack, s3, "v2", "empty_channel_v2.py", str(HERE / "torch_job"), "train.py", BUCKET
    )
    result = result_of(output)
    assert (result["raised"], result["status"]) == ("UnexpectedStatusException", "Failed")
    assert result["failure_reason"].startswith(
        f"ClientError: Data download failed: channel train: no S3 objects found under "
        f"{result['channel']}: "
    ), result


def test_pytorch_estimator_fit_runs_an_mpi_job(sdk_stack: Stack, s3: MotoServer) -> None:
    distribution = {"mpi": {"enabled": True, "processes_per_host": 2}}
    output = fit(sdk_stack, s3, EXAMPLES / "scripts", "mpi_hello.py", distribution)
    ranks = sorted(reports(output, "mpi "), key=lambda r: r["rank"])
    assert [(r["rank"], r["size"], r["sum"]) for r in ranks] == [(i, 4, 10) for i in range(4)]
    assert sorted(r["instance"] for r in ranks) == ["algo-1"] * 2 + ["algo-2"] * 2
    assert all(r["sm_hp_epochs"] == "2" for r in ranks)
    assert result_of(output)["status"] == "Completed"


def test_boto3_waiters_see_jobs_complete_and_stop(sdk_stack: Stack) -> None:
    with sdk_stack.client() as client:
        keys = client.aws_credentials()
    sm = boto3.client(
        "sagemaker",
        endpoint_url=sdk_stack.url,
        region_name=REGION,
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    scripts = EXAMPLES / "scripts"

    def create(name: str, program: str) -> None:
        sm.create_training_job(
            TrainingJobName=name,
            RoleArn="arn:aws:iam::123456789012:role/SageMakerRole",
            AlgorithmSpecification={
                "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/"
                "pytorch-training:2.1.0-cpu-py310",
                "TrainingInputMode": "File",
            },
            HyperParameters={
                "sagemaker_program": json.dumps(program),
                "sagemaker_submit_directory": json.dumps(scripts.as_uri()),
            },
            OutputDataConfig={"S3OutputPath": (sdk_stack.home / "out").as_uri()},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 600},
        )

    waiter = sm.get_waiter("training_job_completed_or_stopped")
    create("waits-for-completion", "report_env.py")
    waiter.wait(TrainingJobName="waits-for-completion", WaiterConfig={"Delay": 1})
    done = sm.describe_training_job(TrainingJobName="waits-for-completion")
    check_answer(sm, "DescribeTrainingJob", done)
    assert done["TrainingJobStatus"] == "Completed"
    assert done["TrainingTimeInSeconds"] >= 1
    assert [t["Status"] for t in done["SecondaryStatusTransitions"]][-1] == "Completed"

    create("waits-for-stop", "long_running.py")
    with sdk_stack.client() as client:
        sdk_stack.wait_for(
            client, "waits-for-stop", lambda job: job["secondary_status"] == "Training"
        )
    sm.stop_training_job(TrainingJobName="waits-for-stop")
    waiter.wait(TrainingJobName="waits-for-stop", WaiterConfig={"Delay": 1})
    assert sm.describe_training_job(TrainingJobName="waits-for-stop")["TrainingJobStatus"] == (
        "Stopped"
    )


def test_model_trainer_with_torchrun_trains_on_two_instances(
    sdk_stack: Stack, s3: MotoServer
) -> None:
    """The SDK v3 runs its own driver (ContainerEntrypoint, an sm_drivers channel) that
    reads /opt/ml itself and starts torchrun with algo-1 as the master."""
    image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
    source = str(HERE / "torch_job")
    output = run_sdk(sdk_stack, s3, "v3", "train_v3.py", source, "train.py", "2", BUCKET, image)
    ranks = sorted(reports(output, "rank "), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["sum"], r["host"]) for r in ranks] == [
        (0, 2, 3.0, "algo-1"),
        (1, 2, 3.0, "algo-2"),
    ]
    result = result_of(output)
    assert result["status"] == "Completed"
    assert model_stored(s3, result["model_data"])
    with sdk_stack.client() as client:
        job = client.get_job(result["name"])
    assert job["spec"]["container_entrypoint"] == ["/bin/bash"]
    assert sorted(job["spec"]["inputs"]) == ["code", "sm_drivers"]


def test_network_isolation_ships_the_code_in_a_channel_and_closes_the_network(
    sdk_stack: Stack, s3: MotoServer
) -> None:
    """``enable_network_isolation=True``: the SDK uploads the code as the ``code``
    channel and names it /opt/ml/input/data/code/sourcedir.tar.gz; each instance unpacks
    it from there, and its scripts reach nothing beyond the job."""
    output = run_sdk(sdk_stack, s3, "v2", "fit_isolated_v2.py", str(HERE / "isolated_job"), BUCKET)
    result = result_of(output)
    assert result["status"] == "Completed"
    assert result["isolation"] is True
    assert sorted(result["channels"]) == ["code", "training"]
    assert json.loads(result["submit_directory"]) == "/opt/ml/input/data/code/sourcedir.tar.gz"
    found = sorted(reports(output, "isolated "), key=lambda r: r["host"])
    assert [r["host"] for r in found] == ["algo-1", "algo-2"]
    for report in found:
        assert report["cwd"] == "/opt/ml/code"
        assert report["files"] == ["helper.csv", "train.py"]
        assert report["module_dir"] == "/opt/ml/input/data/code/sourcedir.tar.gz"
        assert sorted(report["channels"]) == ["code", "training"]
        assert report["training"] == ["rows.csv"]
        assert report["pypi"] == "gaierror"
    with sdk_stack.client() as client:
        job = client.get_job(result["name"])
    assert job["spec"]["enable_network_isolation"] is True
