"""One 2-instance job per distribution mode, through the real service, worker and local
backend, each checked against what its script observed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioning.local import processes
from runyard.client import Client
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e


class Lines(list[str]):
    """What a job's instances printed, with the whole log beside it for a failed check."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__(str(event["message"]) for event in events)
        self.log = _every_event(events)


def _run(
    stack: Stack, client: Client, source: str | Path, **spec: Any
) -> tuple[dict[str, Any], Lines]:
    job = stack.submit(client, source, instance_type="local", instance_count=2, **spec)
    job = stack.wait_until_ended(client, job["name"])
    events = list(client.logs(job["name"]))
    assert job["status"] == "Completed", stack.explain(job, events)
    # One attempt: the checks below count lines, which a restart would print again.
    assert (job["attempt"], job["restarts"]) == (0, 0), stack.explain(job, events)
    assert processes.marked_processes(job["id"]) == []
    return job, Lines(events)


def _every_event(events: list[dict[str, Any]]) -> str:
    """The whole log with each line's host, stream, seq and time: what tells a line printed
    twice from a line stored twice."""
    return "\n".join(
        f"{e.get('host')} {e.get('stream')} #{e.get('seq')} {e.get('time')}: {e.get('message')}"
        for e in events
    )


def _untagged(line: str) -> str:
    """A rank's line without mpirun's "[1,3]<stdout>: " tag."""
    return re.sub(r"^\[\d+,\d+\]<std(?:out|err)>:\s?", "", line)


def test_mpi_with_mpi4py_runs_every_rank_across_instances(stack: Stack) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            "scripts",
            name="mpi-4py",
            entry_point="mpi_hello.py",
            distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
            hyperparameters={"epochs": 3},
        )
    reports = [
        json.loads(_untagged(line).removeprefix("mpi ")) for line in lines if "mpi {" in line
    ]
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3], lines.log
    assert {r["size"] for r in reports} == {4}
    assert {r["sum"] for r in reports} == {10}
    # Slots fill host by host; SM_* comes from algo-1 on every rank, as on SageMaker.
    assert {r["rank"]: r["instance"] for r in reports} == {
        0: "algo-1",
        1: "algo-1",
        2: "algo-2",
        3: "algo-2",
    }
    assert {r["sm_current_host"] for r in reports} == {"algo-1"}
    assert all(r["args"] == ["--epochs", "3"] and r["sm_hp_epochs"] == "3" for r in reports)
    assert job["model_artifacts"]


def test_mpi_with_torch_initialised_from_open_mpi_variables(stack: Stack) -> None:
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            "scripts",
            name="mpi-torch",
            entry_point="torch_from_ompi.py",
            distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
        )
    seen = sorted(_untagged(line) for line in lines if "torch rank" in line)
    assert seen == ["torch rank 0/2 local 0 sum 3", "torch rank 1/2 local 0 sum 3"], lines.log


def test_pytorchddp_runs_an_env_rendezvous_script_under_mpirun(stack: Stack) -> None:
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            "pytorch-ddp",
            name="pytorchddp-1",
            entry_point="train.py",
            distribution={"pytorchddp": {"enabled": True}},
            hyperparameters={"epochs": 2},
        )
    ranks = sorted(_untagged(line) for line in lines if "backend gloo" in line)
    assert ranks == [
        "rank 0/2 on algo-1 (local rank 0, backend gloo)",
        "rank 1/2 on algo-1 (local rank 0, backend gloo)",
    ], lines.log
    assert any("saved model" in line for line in lines)


def test_data_parallel_runs_a_sagemaker_script_unchanged(stack: Stack) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            "dataparallel",
            name="smddp-1",
            entry_point="train.py",
            distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
            hyperparameters={"epochs": 3},
        )
    ranks = sorted(_untagged(line) for line in lines if "local rank" in line)
    assert ranks == [
        "rank 0/2, local rank 0/1, device cpu",
        "rank 1/2, local rank 0/1, device cpu",
    ], lines.log
    accuracy = next(_untagged(line) for line in lines if "model saved to" in line)
    assert float(accuracy.split()[1].rstrip(",")) > 0.9
    assert job["model_artifacts"]


def test_parameter_server_trains_the_example_to_its_target_loss(stack: Stack) -> None:
    with stack.client() as client:
        job, lines = _run(
            stack,
            client,
            "parameter-server",
            name="ps-1",
            entry_point="train.py",
            distribution={"parameter_server": {"enabled": True}},
            hyperparameters={"epochs": 4, "target-loss": 0.3},
        )
    assert sorted(line for line in lines if line.startswith("worker ") and "/2 on" in line) == [
        "worker 0/2 on algo-1",
        "worker 1/2 on algo-2",
    ]
    finals = [line for line in lines if "final loss" in line]
    assert len(finals) == 2
    assert all(float(line.split("final loss ")[1].split()[0]) < 0.3 for line in finals)
    assert job["model_artifacts"]


def test_multi_worker_mirrored_strategy_gets_sagemakers_tf_config(stack: Stack) -> None:
    with stack.client() as client:
        _, lines = _run(
            stack,
            client,
            "scripts",
            name="mwms-1",
            entry_point="tf_config_report.py",
            framework="tensorflow",
            distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
        )
    configs = [
        json.loads(line.removeprefix("TF_CONFIG "))
        for line in lines
        if line.startswith("TF_CONFIG")
    ]
    assert sorted(c["task"]["index"] for c in configs) == [0, 1]
    assert {c["task"]["type"] for c in configs} == {"worker"}
    assert all(len(c["cluster"]["worker"]) == 2 and c["environment"] == "cloud" for c in configs)


def _wheel(tmp_path: Path) -> Path:
    """A tiny package as a wheel, built here, so requirements.txt installs it offline."""
    package = tmp_path / "tinydep"
    (package / "tinydep").mkdir(parents=True)
    (package / "tinydep" / "__init__.py").write_text("ANSWER = 42\n")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinydep"\nversion = "0.1"\n'
    )
    out = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(package),
        ],
        check=True,
    )
    return next(out.glob("tinydep-*.whl"))


def test_requirements_and_a_package_entry_point(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "trainpkg").mkdir(parents=True)
    (source / "wheels").mkdir()
    wheel = _wheel(tmp_path)
    shutil.copy(wheel, source / "wheels")
    (source / "requirements.txt").write_text(f"./wheels/{wheel.name}\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "trainpkg"\nversion = "0.1"\n'
        '[tool.setuptools]\npackages = ["trainpkg"]\n'
    )
    (source / "trainpkg" / "__init__.py").write_text("")
    (source / "trainpkg" / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (source / "trainpkg" / "train.py").write_text(
        "import tinydep\n"
        "from .helpers import double\n"  # a relative import: only works when run as a module
        "print(f'module {__name__} answer {double(tinydep.ANSWER)}', flush=True)\n"
    )
    with stack.client() as client:
        _, lines = _run(stack, client, source, name="package-1", entry_point="trainpkg/train.py")
    assert lines.count("module __main__ answer 84") == 2  # one per instance
    assert any(line.startswith("Installing requirements.txt") for line in lines)
    # The service's own environment is untouched.
    assert (
        subprocess.run([sys.executable, "-c", "import tinydep"], capture_output=True).returncode
        != 0
    )


def test_a_failing_install_fails_the_job_with_pips_error(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('never runs')\n")
    (source / "requirements.txt").write_text("./no-such-package-dir\n")
    with stack.client() as client:
        job = stack.submit(
            client, source, name="badreq-1", entry_point="train.py", instance_type="local"
        )
        job = stack.wait_until_ended(client, "badreq-1")
    assert job["status"] == "Failed"
    assert job["failure_reason"].startswith("InstallError: pip could not install requirements.txt:")
    assert "no-such-package-dir" in job["failure_reason"]


def test_stopping_an_mpi_job_leaves_no_rank_or_daemon(stack: Stack) -> None:
    with stack.client() as client:
        job = stack.submit(
            client,
            "scripts",
            name="mpi-stop",
            entry_point="long_running.py",
            instance_type="local",
            instance_count=2,
            distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
        )

        def both_ranks_ticking(_job: dict[str, Any]) -> bool:
            ticks = [_untagged(e["message"]) for e in client.logs("mpi-stop")]
            return ticks.count("tick 1") >= 2

        stack.wait_for(client, "mpi-stop", both_ranks_ticking)
        client.stop_job("mpi-stop")
        job = stack.wait_until_ended(client, "mpi-stop", timeout=60)
    assert job["status"] == "Stopped"
    assert processes.marked_processes(job["id"]) == []
