"""End to end on the embedded defaults: real API, worker, beat, runtime and scripts."""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from provisioning.local import processes
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

DDP = {"torch_distributed": {"enabled": True}}


def _messages(client: Any, name: str, host: str | None = None) -> list[str]:
    return [event["message"] for event in client.logs(name, host=host)]


def _pid_alive(pid: int) -> bool:
    identity = processes.identify(pid)
    return identity is not None and processes.is_alive(identity)


def _machine_pids(job_id: str, reported: list[int]) -> list[int]:
    """This machine's pids of the processes a script reported from inside its instance
    (the same numbers where the instance has no PID namespace of its own)."""
    found = []
    for pid in processes.marked_processes(job_id):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        nspids = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if int(nspids[-1]) in reported:
            found.append(pid)
    return found


def test_torch_distributed_job_completes_with_both_ranks_and_a_model(stack: Stack) -> None:
    with stack.client() as client:
        job = stack.submit(
            client,
            "pytorch-ddp",
            name="ddp-1",
            entry_point="train.py",
            instance_count=2,
            distribution=DDP,
            hyperparameters={"epochs": 2},
        )
        job = stack.wait_until_ended(client, "ddp-1")
        assert job["status"] == "Completed", stack.explain(job, list(client.logs("ddp-1")))
        lines = _messages(client, "ddp-1")
        assert "rank 0/2 on algo-1 (local rank 0, backend gloo)" in lines
        assert "rank 1/2 on algo-2 (local rank 0, backend gloo)" in lines
        assert any(
            line.startswith("epoch 2/2 rank 1")
            for line in _messages(client, "ddp-1", host="algo-2")
        )

    secondaries = [t["secondary_status"] for t in job["transitions"]]
    assert secondaries[:2] == ["Starting", "LaunchingInstances"]
    assert "Training" in secondaries
    assert secondaries[-1] == "Completed"
    assert job["training_start_time"] <= job["training_end_time"]
    assert job["billable_seconds"] >= 1
    model = storage.local_path(job["model_artifacts"])
    assert model == stack.home / "artifacts" / "ddp-1" / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        assert {"model.pt", "metrics.json"} <= set(tar.getnames())
    assert processes.marked_processes(job["id"]) == []
    assert not (stack.home / "jobs" / job["id"]).exists()


def test_failing_script_ends_failed_with_its_error(stack: Stack) -> None:
    with stack.client() as client:
        stack.submit(client, "scripts", name="fails-1", entry_point="fail.py", instance_count=2)
        job = stack.wait_until_ended(client, "fails-1")
    assert job["status"] == "Failed"
    exception, heading, *frames = job["failure_reason"].splitlines()
    assert exception == (
        "AlgorithmError: FileNotFoundError: no training data at /data/train.csv, exit code: 1"
    )
    # Then the stack, its innermost frame last.
    assert heading == "Traceback (most recent call last):"
    assert re.fullmatch(r'  File ".*/fail\.py", line 7, in load', frames[-2])
    assert frames[-1] == '    raise FileNotFoundError(f"no training data at {path}")'
    assert processes.marked_processes(job["id"]) == []


def test_stop_ends_every_process_of_the_job(stack: Stack) -> None:
    with stack.client() as client:
        stack.submit(
            client, "scripts", name="stop-1", entry_point="long_running.py", instance_count=2
        )
        stack.wait_for(
            client,
            "stop-1",
            lambda job: len([m for m in _messages(client, "stop-1") if m.startswith("pids")]) == 2,
        )
        reported = [
            int(pid)
            for line in _messages(client, "stop-1")
            if line.startswith("pids")
            for pid in line.split()[1:]
        ]
        pids = _machine_pids(client.get_job("stop-1")["id"], reported)
        assert len(pids) == len(reported)
        assert all(_pid_alive(pid) for pid in pids)
        stopping = client.stop_job("stop-1")
        assert stopping["status"] == "Stopping"
        job = stack.wait_until_ended(client, "stop-1", timeout=60)
        lines = _messages(client, "stop-1")
    assert (job["status"], job["secondary_status"]) == ("Stopped", "Stopped")
    assert [t["secondary_status"] for t in job["transitions"]][-2:] == ["Stopping", "Stopped"]
    assert lines.count("saved on SIGTERM") == 2  # each script got its chance to save
    # The log says what ended the scripts, not that they exited as if done.
    assert (
        lines[-1] == "Training job stopped at a user's request (runyard stop, or StopTrainingJob)"
    )
    assert not [line for line in lines if "exited with code 0" in line]
    ended = [line for line in lines if line.startswith("Script ended after")]
    assert len(ended) == 2, lines
    assert all(
        line.endswith("the instance got SIGTERM: its job is stopping or restarting")
        for line in ended
    )
    assert job["model_artifacts"], "what the script saved on SIGTERM is kept"
    assert not any(_pid_alive(pid) for pid in pids)
    assert processes.marked_processes(job["id"]) == []


def test_max_run_stops_the_job(stack: Stack) -> None:
    with stack.client() as client:
        stack.submit(client, "scripts", name="maxrun-1", entry_point="long_running.py", max_run=3)
        job = stack.wait_until_ended(client, "maxrun-1", timeout=60)
        lines = _messages(client, "maxrun-1")
    assert (job["status"], job["secondary_status"]) == ("Stopped", "MaxRuntimeExceeded")
    assert lines[-1] == "Training job stopped: its max_run of 3 s was reached"
    assert not [line for line in lines if "exited with code 0" in line]
    assert "MaxRuntimeExceeded" in [t["secondary_status"] for t in job["transitions"]]
    assert 3 <= job["billable_seconds"] <= 20
    assert processes.marked_processes(job["id"]) == []


def test_killed_worker_is_replaced_and_the_job_still_ends_right(stack: Stack) -> None:
    with stack.client() as client:
        stack.submit(
            client,
            "pytorch-ddp",
            name="crash-1",
            entry_point="train.py",
            instance_count=2,
            distribution=DDP,
            hyperparameters={"epochs": 6},
        )
        stack.wait_for(client, "crash-1", lambda job: job["secondary_status"] == "Training")
        stack.kill("worker")  # SIGKILL: no goodbye, no acks, whatever it held is lost
        # The instances finish and report while no worker is there to notice.
        stack.wait_for(
            client,
            "crash-1",
            lambda job: (
                len(job["instances"]) == 2
                and all(i["phase"] == "Completed" for i in job["instances"])
            ),
        )
        assert client.get_job("crash-1")["status"] == "InProgress"
        stack.start("worker")
        job = stack.wait_until_ended(client, "crash-1")
        assert job["status"] == "Completed", stack.explain(job, list(client.logs("crash-1")))
    assert job["model_artifacts"]
    assert processes.marked_processes(job["id"]) == []


def test_a_vanished_instance_restarts_the_job_and_leaves_nothing_of_it(stack: Stack) -> None:
    with stack.client() as client:
        job = stack.submit(
            client, "scripts", name="lost-1", entry_point="long_running.py", instance_count=2
        )
        stack.wait_for(client, "lost-1", lambda j: j["secondary_status"] == "Training")
        runtime = [
            pid for pid in processes.marked_processes(job["id"], "algo-2") if _is_runtime(pid)
        ]
        assert len(runtime) == 1
        first_attempt = set(processes.marked_processes(job["id"]))
        os.kill(runtime[0], 9)  # the script it started is orphaned, still running
        job = stack.wait_for(
            client,
            "lost-1",
            lambda j: j["attempt"] == 1 and j["secondary_status"] == "Training",
            timeout=60,
        )
        # Nothing of the lost attempt survives it, the orphaned script included.
        assert not first_attempt & set(processes.marked_processes(job["id"]))
        client.stop_job("lost-1")
        job = stack.wait_until_ended(client, "lost-1", timeout=60)
    assert (job["status"], job["infrastructure_restarts"]) == ("Stopped", 1)
    restarting = next(t for t in job["transitions"] if t["secondary_status"] == "Restarting")
    assert re.search(
        r"InstanceLost: algo-2 ended without reporting a result", restarting["message"]
    )
    assert processes.marked_processes(job["id"]) == []


def test_logs_survive_the_instances(stack: Stack) -> None:
    with stack.client() as client:
        stack.submit(
            client,
            "scripts",
            name="env-1",
            entry_point="report_env.py",
            instance_count=2,
            hyperparameters={"epochs": 4},
        )
        job = stack.wait_until_ended(client, "env-1")
        # Read at once: every line is stored before the job reads as ended.
        seen = [line for line in _messages(client, "env-1") if line.startswith("seen ")]
    assert job["status"] == "Completed"
    assert not (stack.home / "jobs" / job["id"]).exists()
    assert sorted(seen) == [
        'seen {"epochs": 4, "files": [], "host": "algo-1", "hosts": ["algo-1", "algo-2"]}',
        'seen {"epochs": 4, "files": [], "host": "algo-2", "hosts": ["algo-1", "algo-2"]}',
    ]


def _is_runtime(pid: int) -> bool:
    """The instance's runtime itself, not the unshare that leads an instance with
    namespaces of its own."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"runtime.train" in argv and not argv[0].endswith(b"unshare")
