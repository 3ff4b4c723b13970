"""What scripts written for SageMaker's containers rely on beyond the SM_* variables, on
two local instances through the real service: a distribution named in hyperparameters
(as the SDK and the toolkits' own tests name it), the rendezvous every PyTorch job is
given, and the ``model_dir`` every TensorFlow job is given."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from provisioning.local import processes
from runyard.client import Client
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).parent / "sagemaker_conventions"


def _run(stack: Stack, client: Client, **spec: Any) -> tuple[dict[str, Any], list[str]]:
    job = stack.submit(client, SCRIPTS, **{"instance_count": 2, **spec})
    job = stack.wait_until_ended(client, job["name"])
    events = list(client.logs(job["name"]))
    assert job["status"] == "Completed", stack.explain(job, events)
    assert processes.marked_processes(job["id"]) == []
    return job, [str(event["message"]) for event in events]


def _reports(lines: list[str], prefix: str) -> list[dict[str, Any]]:
    # Under mpirun a rank's line starts with its tag ("[1,3]<stdout>:").
    untagged = (re.sub(r"^\[\d+,\d+\]<std(?:out|err)>:\s?", "", line) for line in lines)
    return [json.loads(line[len(prefix) :]) for line in untagged if line.startswith(prefix)]


def test_mpi_named_in_hyperparameters_runs_a_horovod_script_on_every_rank(
    stack: Stack,
) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            entry_point="horovod_size.py",
            hyperparameters={
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
            },
        )
    reports = _reports(lines, "horovod ")
    assert sorted(report["rank"] for report in reports) == [0, 1, 2, 3], lines
    assert {report["size"] for report in reports} == {4}
    assert job["spec"]["distribution"]["mpi"]["processes_per_host"] == 2


def test_a_pytorch_job_without_a_distribution_is_given_the_rendezvous(stack: Stack) -> None:
    with stack.client() as client:
        _job, lines = _run(stack, client, entry_point="rendezvous.py")
    reports = sorted(_reports(lines, "rendezvous "), key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == [0, 1], lines
    assert {report["world"] for report in reports} == {2}
    assert {report["sum"] for report in reports} == {3.0}
    [env] = {json.dumps(report["env"], sort_keys=True) for report in reports}
    given = json.loads(env)
    assert given["MASTER_PORT"] == "7777"
    assert (given["NCCL_IB_DISABLE"], given["NCCL_DEBUG"]) == ("1", "WARN")
    assert given["MASTER_ADDR"]
    assert given["TF_CPP_MIN_LOG_LEVEL"] is None
    # Reverse lookups of a peer's address answer inside an instance.
    assert not [line for line in lines if "hostname of the client socket" in line], lines


def test_a_job_s_own_environment_wins_over_the_framework_s(stack: Stack) -> None:
    with stack.client() as client:
        _job, lines = _run(
            stack, client, entry_point="rendezvous.py", environment={"NCCL_DEBUG": "INFO"}
        )
    assert {report["env"]["NCCL_DEBUG"] for report in _reports(lines, "rendezvous ")} == {"INFO"}


def test_a_tensorflow_job_is_given_a_model_dir_and_no_rendezvous(stack: Stack) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack, client, entry_point="model_dir.py", framework="tensorflow", instance_count=1
        )
    [report] = _reports(lines, "model_dir ")
    # Its output is not on S3: the instance's model directory, which is uploaded.
    assert report["model_dir"] == report["sm_model_dir"]
    assert report["env"] == {
        "MASTER_ADDR": None,
        "MASTER_PORT": None,
        "TF_CPP_MIN_LOG_LEVEL": "1",
    }
    assert job["model_artifacts"]


def test_a_tensorflow_job_s_own_model_dir_wins(stack: Stack) -> None:
    with stack.client() as client:
        _job, lines = _run(
            stack,
            client,
            entry_point="model_dir.py",
            framework="tensorflow",
            instance_count=1,
            hyperparameters={"model_dir": "s3://bucket/elsewhere"},
        )
    [report] = _reports(lines, "model_dir ")
    assert report["model_dir"] == "s3://bucket/elsewhere"
