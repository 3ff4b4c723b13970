"""The script contract, read from the same files the backends write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract.instance_config import load
from runtime.instance.environment import launcher_environment, script_environment
from tests.instances import launch_request, write_instances

CONTRACT = [
    "SM_MODEL_DIR",
    "SM_CHANNELS",
    "SM_HPS",
    "SM_HOSTS",
    "SM_CURRENT_HOST",
    "SM_CURRENT_INSTANCE_TYPE",
    "SM_NUM_GPUS",
    "SM_NUM_CPUS",
    "SM_OUTPUT_DIR",
    "SM_OUTPUT_DATA_DIR",
    "SM_OUTPUT_INTERMEDIATE_DIR",
    "SM_INPUT_DIR",
    "SM_INPUT_CONFIG_DIR",
    "SM_RESOURCE_CONFIG",
    "SM_INPUT_DATA_CONFIG",
    "SM_USER_ENTRY_POINT",
    "SM_USER_ARGS",
    "SM_TRAINING_ENV",
    "SM_FRAMEWORK_PARAMS",
    "SM_LOG_LEVEL",
    "SM_NETWORK_INTERFACE_NAME",
    "TRAINING_JOB_NAME",
    "SM_BASE_DIR",
    "SM_CHECKPOINT_DIR",
]


def test_script_sees_the_whole_contract(tmp_path: Path) -> None:
    request = launch_request(
        tmp_path / "src",
        instance_count=2,
        hyperparameters={
            "epochs": 3,
            "lr": 0.1,
            "model-name": "net",
            "sagemaker_program": "train.py",
        },
        inputs={
            "train": "file:///data/train",
            "eval": {"uri": "file:///data/eval", "content_type": "text/csv"},
        },
        environment={"MY_FLAG": "on"},
    )
    bases = write_instances(tmp_path / "job", request, master_port=29400)
    config = load(bases["algo-2"])
    env = script_environment(
        config,
        {"PATH": "/bin", "RUNYARD_JOB_TOKEN": "secret", "RUNYARD_AGENT_KEY": "shared"},
        num_gpus=0,
        num_cpus=2,
    )
    base = bases["algo-2"]

    assert set(CONTRACT) <= set(env)
    # The instance's credential and the job's agent secret never reach user code.
    assert "RUNYARD_JOB_TOKEN" not in env
    assert "RUNYARD_AGENT_KEY" not in env
    assert env["PATH"] == "/bin"
    assert env["MY_FLAG"] == "on"
    assert env["SM_MODEL_DIR"] == str(base / "model")
    assert env["SM_CHECKPOINT_DIR"] == str(base / "checkpoints")
    # Where SageMaker's own toolkit (sagemaker-training) looks for the instance's layout,
    # here too where instances share the machine and /opt/ml is not theirs.
    assert env["SAGEMAKER_BASE_DIR"] == str(base)
    assert env["SM_BASE_DIR"] == str(base)
    assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
    assert env["SM_CURRENT_HOST"] == "algo-2"
    assert json.loads(env["SM_CHANNELS"]) == ["eval", "train"]
    assert env["SM_CHANNEL_TRAIN"] == str(base / "input" / "data" / "train")
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.1, "model-name": "net"}
    assert env["SM_HP_EPOCHS"] == "3"
    assert env["SM_HP_MODEL_NAME"] == "net"
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_program": "train.py"}
    assert json.loads(env["SM_USER_ARGS"]) == [
        "--epochs",
        "3",
        "--lr",
        "0.1",
        "--model-name",
        "net",
    ]
    assert json.loads(env["SM_INPUT_DATA_CONFIG"])["eval"]["ContentType"] == "text/csv"
    resource = json.loads(env["SM_RESOURCE_CONFIG"])
    assert resource["current_host"] == "algo-2"
    assert resource["host_addresses"]["algo-1"] == "127.0.0.1"
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert training_env["master_hostname"] == "algo-1"
    assert training_env["is_master"] is False
    assert training_env["num_cpus"] == 2
    assert training_env["job_name"] == "job-1"
    assert training_env["channel_input_dirs"]["eval"] == str(base / "input" / "data" / "eval")
    assert training_env["current_instance_group"] == "homogeneousCluster"
    assert training_env["instance_groups"] == ["homogeneousCluster"]
    assert training_env["distribution_hosts"] == ["algo-1", "algo-2"]


def _environment(tmp_path: Path, **spec: Any) -> tuple[dict[str, str], Path]:
    bases = write_instances(tmp_path / "job", launch_request(tmp_path / "src", **spec), 7777)
    config = load(bases["algo-1"])
    env = script_environment(config, {"AWS_REGION": "eu-west-1"}, num_gpus=0, num_cpus=2)
    return env, bases["algo-1"]


def test_a_pytorch_script_is_given_what_sagemakers_pytorch_container_exports(
    tmp_path: Path,
) -> None:
    env, _base = _environment(tmp_path, instance_count=2)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "7777")
    assert (env["NCCL_IB_DISABLE"], env["NCCL_DEBUG"]) == ("1", "WARN")
    assert "TF_CPP_MIN_LOG_LEVEL" not in env
    assert "model_dir" not in json.loads(env["SM_HPS"])


def test_the_jobs_own_environment_wins_over_the_containers(tmp_path: Path) -> None:
    env, _base = _environment(tmp_path, environment={"NCCL_DEBUG": "INFO", "MASTER_PORT": "1234"})
    assert (env["NCCL_DEBUG"], env["MASTER_PORT"]) == ("INFO", "1234")


def test_the_launchers_own_processes_get_the_environment_without_the_jobs_variables(
    tmp_path: Path,
) -> None:
    job = {"LD_PRELOAD": "/job/hook.so", "NCCL_DEBUG": "INFO", "AWS_REGION": "us-east-2"}
    bases = write_instances(
        tmp_path / "job", launch_request(tmp_path / "src", environment=job), 7777
    )
    config = load(bases["algo-1"])
    inherited = {"PATH": "/bin", "RUNYARD_JOB_TOKEN": "secret"}
    launcher = launcher_environment(config, inherited, num_gpus=0, num_cpus=2)
    script = script_environment(config, inherited, num_gpus=0, num_cpus=2)
    assert "LD_PRELOAD" not in launcher
    assert "AWS_REGION" not in launcher
    # The framework's defaults and the SageMaker contract are everyone's.
    assert launcher["NCCL_DEBUG"] == "WARN"
    assert launcher["SM_CURRENT_HOST"] == "algo-1"
    assert "RUNYARD_JOB_TOKEN" not in launcher
    # The script's is the launcher's with the job's variables over it.
    assert script == {**launcher, **job}


def test_a_tensorflow_script_is_given_tensorflows_variables_and_a_model_dir(
    tmp_path: Path,
) -> None:
    env, base = _environment(tmp_path, framework="tensorflow")
    assert "MASTER_ADDR" not in env
    assert (env["TF_CPP_MIN_LOG_LEVEL"], env["S3_REGION"]) == ("1", "eu-west-1")
    # Its output is not on S3: the instance's model directory, which is uploaded.
    assert json.loads(env["SM_HPS"])["model_dir"] == str(base / "model")
    assert json.loads(env["SM_USER_ARGS"])[-2:] == ["--model_dir", str(base / "model")]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"output_path": "s3://bucket/out"}, "s3://bucket/out/job-1/model"),
        # Under mpirun, as the SDK sends it: the instance's own.
        (
            {
                "output_path": "s3://bucket/out",
                "instance_count": 2,
                "distribution": {"mpi": {"enabled": True}},
            },
            None,
        ),
        ({"output_path": "s3://bucket/out", "hyperparameters": {"model_dir": "/tmp/m"}}, "/tmp/m"),
    ],
)
def test_a_tensorflow_model_dir_is_the_sdks(
    tmp_path: Path, spec: dict[str, Any], expected: str | None
) -> None:
    env, base = _environment(tmp_path, framework="tensorflow", **spec)
    assert json.loads(env["SM_HPS"])["model_dir"] == (expected or str(base / "model"))
