"""Faults injected into real jobs: an instance killed mid-training, a spot interruption,
failing scripts with and without retries. The real API, worker and beat run the real
runtime on local instances; checkpoints go through a file:// checkpoint store.

The training script (examples/checkpointing) checks, when it resumes, that its checkpoint
holds exactly the epochs before the one it resumes at, and the model it stores at the end
lists every epoch trained, so a resume that lost or repeated work fails the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from provisioning.local import network
from runyard.client import Client
from service.jobs import billing
from tests.e2e.conftest import Stack, log_lines

pytestmark = pytest.mark.e2e

EPOCHS = 24


@pytest.fixture(scope="module")
def fault_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-faults")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env.update(
        {
            "RUNYARD_SPOT_GRACE_SECONDS": "20",
            "RUNYARD_RESTART_BACKOFF_SECONDS": "0.5",
            # An instance cut off from the job's network is found lost within seconds.
            "RUNYARD_PEER_TIMEOUT_SECONDS": "5",
        }
    )
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


def _submit(stack: Stack, client: Client, tmp_path: Path, **spec: Any) -> dict[str, Any]:
    spec.setdefault("hyperparameters", {"epochs": EPOCHS, "epoch-seconds": 0.25})
    return stack.submit(
        client,
        "checkpointing",
        entry_point="train.py",
        checkpoint_s3_uri=(tmp_path / "checkpoints").as_uri(),
        output_path=(tmp_path / "output").as_uri(),
        **spec,
    )


def _wait_for_line(stack: Stack, client: Client, name: str, text: str) -> None:
    deadline = time.monotonic() + 120
    while not any(text in line for line in log_lines(client, name)):
        if time.monotonic() > deadline:
            pytest.fail(f"{name} never printed {text!r}\n{stack.diagnostics()}")
        time.sleep(0.1)


def _trained_epochs(job: dict[str, Any], tmp_path: Path) -> list[int]:
    model = job["model_artifacts"].removeprefix("file://")
    with tarfile.open(model) as archive:
        archive.extract("model.pt", tmp_path / "model", filter="data")
    history: list[int] = torch.load(tmp_path / "model" / "model.pt")["history"]
    return history


def _ended(stack: Stack, client: Client, name: str) -> dict[str, Any]:
    return stack.wait_until_ended(client, name, timeout=240)


def _resumed_at(lines: list[str]) -> list[int]:
    prefix = "resumed from checkpoint at epoch "
    return [int(line.removeprefix(prefix)) for line in lines if line.startswith(prefix)]


def test_a_killed_instance_restarts_the_job_from_its_checkpoint(
    fault_stack: Stack, tmp_path: Path
) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            instance_count=2,
            distribution={"torch_distributed": {"enabled": True}},
        )
        name = job["name"]
        _wait_for_line(fault_stack, client, name, f"epoch 6/{EPOCHS}")
        # algo-2's machine dies: its whole process group, without a word to the service.
        pid_file = fault_stack.home / "jobs" / job["id"] / "algo-2.pid.json"
        os.killpg(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)
        job = _ended(fault_stack, client, name)
        lines = log_lines(client, name)
        assert job["status"] == "Completed", fault_stack.explain(job, list(client.logs(name)))
    assert (job["restarts"], job["infrastructure_restarts"], job["attempt"]) == (0, 1, 1)
    secondaries = [t["secondary_status"] for t in job["transitions"]]
    assert "Restarting" in secondaries
    restarting = next(t for t in job["transitions"] if t["secondary_status"] == "Restarting")
    assert "InstanceLost: algo-2 ended without reporting a result" in restarting["message"]
    # Both instances of the second attempt resumed where the checkpoint left off (at least
    # the epoch seen before the kill), and no epoch was lost or trained twice.
    resumed = _resumed_at(lines)
    assert len(resumed) == 2, lines
    assert resumed[0] == resumed[1] >= 6, lines
    assert _trained_epochs(job, tmp_path) == list(range(EPOCHS))


def test_an_instance_cut_off_the_network_restarts_the_job_from_its_checkpoint(
    fault_stack: Stack, tmp_path: Path
) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            instance_count=2,
            distribution={"torch_distributed": {"enabled": True}},
        )
        name = job["name"]
        assert job["spec"]["instance_count"] == 2
        _wait_for_line(fault_stack, client, name, f"epoch 6/{EPOCHS}")
        assert client.get_job(name)["isolation"] == "namespaces"
        # algo-2's link to the job's network goes down: it and algo-1 no longer reach each
        # other, their collectives block, and nothing ends by itself.
        veth = network.plan(job["id"], ["algo-1", "algo-2"]).port("algo-2").veth
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
        job = _ended(fault_stack, client, name)
        lines = log_lines(client, name)
        assert job["status"] == "Completed", fault_stack.explain(job, list(client.logs(name)))
    assert (job["restarts"], job["infrastructure_restarts"], job["attempt"]) == (0, 1, 1)
    restarting = next(t for t in job["transitions"] if t["secondary_status"] == "Restarting")
    assert "InstanceLost: algo-" in restarting["message"]
    assert "lost the job's network" in " ".join(lines)
    resumed = _resumed_at(lines)
    assert len(resumed) == 2, lines
    assert resumed[0] == resumed[1] >= 6, lines
    assert _trained_epochs(job, tmp_path) == list(range(EPOCHS))


def test_a_spot_interruption_checkpoints_then_resumes(fault_stack: Stack, tmp_path: Path) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            use_spot_instances=True,
            max_run=600,
            max_wait=1200,
        )
        name = job["name"]
        _wait_for_line(fault_stack, client, name, f"epoch 4/{EPOCHS}")
        client.interrupt(name, "algo-1", "capacity reclaimed")
        job = _ended(fault_stack, client, name)
        lines = log_lines(client, name)
        assert job["status"] == "Completed", fault_stack.explain(job, list(client.logs(name)))
    # The script got SIGTERM, saved, and the next attempt resumed right there.
    [saved] = [line for line in lines if line.startswith("SIGTERM: checkpoint at epoch")]
    saved_at = int(saved.split()[4])
    assert _resumed_at(lines) == [saved_at]
    assert _trained_epochs(job, tmp_path) == list(range(EPOCHS))
    assert (job["restarts"], job["infrastructure_restarts"]) == (0, 1)
    interrupted = next(t for t in job["transitions"] if t["secondary_status"] == "Interrupted")
    assert interrupted["message"].startswith("Spot interruption: algo-1: capacity reclaimed")
    # Billed what the attempts worked, at the spot price: the wait between them is
    # training time, not billed time; the savings are the SDK's figure from the two.
    training = billing.training_seconds(
        datetime.fromisoformat(job["training_start_time"]),
        datetime.fromisoformat(job["training_end_time"]),
    )
    assert 1 <= job["billable_seconds"] <= training
    assert job["spot_savings_percent"] == billing.spot_savings_percent(
        job["billable_seconds"], training
    )
    # At least the spot price's saving (RUNYARD_SPOT_PRICE_RATIO, 0.3), the wait on top.
    assert job["spot_savings_percent"] >= 70.0


def test_a_non_retryable_exit_code_fails_without_a_retry(
    fault_stack: Stack, tmp_path: Path
) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            hyperparameters={"epochs": 4, "fail-at-epoch": 1, "fail-code": 2},
            max_retry_attempts=3,
            retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
        )
        job = _ended(fault_stack, client, job["name"])
    assert job["status"] == "Failed"
    assert (job["restarts"], job["attempt"]) == (0, 0)
    assert "Restarting" not in [t["secondary_status"] for t in job["transitions"]]


def test_a_retryable_exit_code_is_retried_and_resumes(fault_stack: Stack, tmp_path: Path) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            hyperparameters={
                "epochs": 6,
                "epoch-seconds": 0.1,
                "fail-at-epoch": 3,
                "fail-code": 75,
            },
            max_retry_attempts=2,
            retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
        )
        job = _ended(fault_stack, client, job["name"])
        lines = log_lines(client, job["name"])
    assert job["status"] == "Completed", job["failure_reason"]
    assert (job["restarts"], job["infrastructure_restarts"]) == (1, 0)
    assert _resumed_at(lines) == [3]
    assert _trained_epochs(job, tmp_path) == list(range(6))


def test_a_retryable_failure_is_retried_up_to_the_limit(fault_stack: Stack, tmp_path: Path) -> None:
    with fault_stack.client() as client:
        job = _submit(
            fault_stack,
            client,
            tmp_path,
            hyperparameters={"epochs": 4, "fail-at-epoch": 0, "fail-code": 75, "fail-on-resume": 1},
            max_retry_attempts=2,
            retry_rules=[{"on_exit_codes": [75], "action": "retry"}],
        )
        job = _ended(fault_stack, client, job["name"])
        lines = log_lines(client, job["name"])
    assert job["status"] == "Failed"
    assert (job["restarts"], job["attempt"]) == (2, 2)
    assert job["failure_reason"].endswith("(no retries left: 2 of max_retry_attempts used)")
    assert lines.count("failing at epoch 0 with exit code 75") == 3
    restarting = [t["message"] for t in job["transitions"] if t["secondary_status"] == "Restarting"]
    assert [message.split(" after:")[0] for message in restarting] == [
        "Restarting (retry 1 of 2)",
        "Restarting (retry 2 of 2)",
    ]
