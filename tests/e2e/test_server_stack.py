"""End to end on a team's deployment: PostgreSQL, and Redis or RabbitMQ as the broker."""

from __future__ import annotations

import tarfile

import pytest

from contract import storage
from provisioning.local import processes
from tests.e2e.conftest import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_torch_distributed_job_completes(server_stack: Stack) -> None:
    with server_stack.client() as client:
        server_stack.submit(
            client,
            "pytorch-ddp",
            name="ddp-pg",
            entry_point="train.py",
            instance_count=2,
            distribution={"torch_distributed": {"enabled": True}},
            hyperparameters={"epochs": 2},
        )
        job = server_stack.wait_until_ended(client, "ddp-pg")
        events = list(client.logs("ddp-pg"))
    lines = [event["message"] for event in events]
    assert job["status"] == "Completed", server_stack.explain(job, events)
    assert "rank 0/2 on algo-1 (local rank 0, backend gloo)" in lines
    assert "rank 1/2 on algo-2 (local rank 0, backend gloo)" in lines
    with tarfile.open(storage.local_path(job["model_artifacts"])) as tar:
        assert "model.pt" in tar.getnames()
    assert processes.marked_processes(job["id"]) == []


def test_failing_script_fails(server_stack: Stack) -> None:
    with server_stack.client() as client:
        server_stack.submit(client, "scripts", name="fails-pg", entry_point="fail.py")
        job = server_stack.wait_until_ended(client, "fails-pg")
    assert job["status"] == "Failed"
    assert "FileNotFoundError: no training data at /data/train.csv" in job["failure_reason"]


def test_stop_ends_the_job(server_stack: Stack) -> None:
    with server_stack.client() as client:
        server_stack.submit(
            client, "scripts", name="stop-pg", entry_point="long_running.py", instance_count=2
        )
        server_stack.wait_for(client, "stop-pg", lambda job: job["secondary_status"] == "Training")
        client.stop_job("stop-pg")
        job = server_stack.wait_until_ended(client, "stop-pg", timeout=60)
    assert job["status"] == "Stopped"
    assert processes.marked_processes(job["id"]) == []
