"""The CLI and the SDK as users run them, against a running stack."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runyard import Estimator, JobFailedError
from tests.e2e.conftest import EXAMPLES, Stack

pytestmark = pytest.mark.e2e


def _runyard(stack: Stack, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # Only RUNYARD_HOME: the CLI must find the server and token on its own.
    env = {k: v for k, v in stack.env.items() if not k.startswith("RUNYARD_")}
    env["RUNYARD_HOME"] = str(stack.home)
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_submit_wait_logs_then_describe_list_and_logs(stack: Stack) -> None:
    submitted = _runyard(
        stack,
        "submit",
        "--name",
        "cli-1",
        "--source-dir",
        str(EXAMPLES / "scripts"),
        "--entry-point",
        "report_env.py",
        "--instance-type",
        "local",
        "--instance-count",
        "2",
        "-H",
        "epochs=5",
        "--wait",
        "--logs",
    )
    assert submitted.returncode == 0, submitted.stderr
    out = submitted.stdout
    assert "Submitted training job cli-1" in out
    assert '[algo-1] seen {"epochs": 5, "files": [], "host": "algo-1"' in out
    assert '[algo-2] seen {"epochs": 5, "files": [], "host": "algo-2"' in out
    assert "Training job cli-1 ended: Completed" in out
    model_line = next(line for line in out.splitlines() if line.startswith("Model: "))
    assert Path(model_line.removeprefix("Model: ")).is_file()

    described = _runyard(stack, "describe", "cli-1")
    assert "Status:           Completed (Completed)" in described.stdout
    as_json = json.loads(_runyard(stack, "describe", "cli-1", "--json").stdout)
    assert as_json["spec"]["hyperparameters"] == {"epochs": 5}

    listed = _runyard(stack, "list", "--prefix", "cli-")
    assert listed.stdout.splitlines()[1].split()[:3] == ["cli-1", "Completed", "Completed"]

    only_two = _runyard(stack, "logs", "cli-1", "--host", "algo-2").stdout.splitlines()
    assert only_two
    assert all(line.startswith("[algo-2]") for line in only_two)
    followed = _runyard(stack, "logs", "cli-1", "-f").stdout
    assert "[algo-1] seen" in followed


def test_submit_from_a_spec_file_with_relative_paths(stack: Stack, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "scripts", project / "code")
    (project / "data").mkdir()
    (project / "data" / "part-0.csv").write_text("1,2\n")
    (project / "job.yaml").write_text(
        "name: spec-1\n"
        "source_dir: code\n"
        "entry_point: report_env.py\n"
        "instance_type: local\n"
        "hyperparameters: {epochs: 3}\n"
        "inputs: {train: data}\n"
    )
    # Run from elsewhere: the paths are relative to the file, not to the shell.
    result = _runyard(stack, "submit", str(project / "job.yaml"), "--wait", "--logs")
    assert result.returncode == 0, result.stderr
    assert '[algo-1] seen {"epochs": 3, "files": ["part-0.csv"], "host": "algo-1"' in result.stdout


def test_a_failed_job_makes_submit_wait_exit_non_zero(stack: Stack) -> None:
    result = _runyard(
        stack,
        "submit",
        "--name",
        "cli-fail",
        "-s",
        str(EXAMPLES / "scripts"),
        "-e",
        "fail.py",
        "-t",
        "local",
        "--wait",
    )
    assert result.returncode == 1
    # Without --logs, --wait shows each transition as it happens.
    assert re.search(r"LaunchingInstances +Launching 1 local instance", result.stdout)
    assert re.search(r"Failed +Training job failed: AlgorithmError", result.stdout)
    assert "Failure reason: AlgorithmError: FileNotFoundError" in result.stdout


def test_errors_are_one_line_and_non_zero(stack: Stack) -> None:
    missing = _runyard(stack, "describe", "no-such-job")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no training job named 'no-such-job' (HTTP 404)"

    bad = _runyard(
        stack, "submit", "-s", str(EXAMPLES / "scripts"), "-e", "fail.py", "-t", "local", "-n", "0"
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith(
        "error: instance_count: Input should be greater than or equal to 1"
    )

    stop_ended = _runyard(stack, "stop", "cli-fail")
    assert stop_ended.returncode == 1
    assert "already ended" in stop_ended.stderr

    env_home = stack.home.parent / "nowhere"
    unreachable = subprocess.run(
        [sys.executable, "-m", "runyard", "list"],
        env={
            "PATH": stack.env["PATH"],
            "RUNYARD_HOME": str(env_home),
            "RUNYARD_URL": "http://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert "cannot reach the Runyard server at http://127.0.0.1:9" in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1


def test_dry_run_prints_the_plan_and_creates_nothing(stack: Stack) -> None:
    result = _runyard(
        stack,
        "submit",
        "--name",
        "dry-1",
        "-s",
        str(EXAMPLES / "scripts"),
        "-e",
        "fail.py",
        "-t",
        "local",
        "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    assert "RUNYARD_JOB_TOKEN: <redacted>" in result.stdout
    assert "input/config/resourceconfig.json: |" in result.stdout
    assert _runyard(stack, "describe", "dry-1").returncode == 1


def test_token_prints_and_mints(stack: Stack) -> None:
    assert _runyard(stack, "token").stdout.strip() == (stack.home / "token").read_text().strip()
    minted = _runyard(stack, "token", "--create", "ci-bot").stdout.strip()
    assert minted.startswith("ry_")


def test_help_on_every_command() -> None:
    commands = [
        "server",
        "api",
        "worker",
        "beat",
        "migrate",
        "submit",
        "list",
        "describe",
        "logs",
        "stop",
        "token",
    ]
    for command in [None, *commands]:
        args = [sys.executable, "-m", "runyard", *([command] if command else []), "--help"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, command
        assert "Usage:" in result.stdout, command


def test_estimator_fit_runs_to_completion(stack: Stack, tmp_path: Path) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    printed: list[str] = []
    with stack.client() as client:
        estimator = Estimator(
            entry_point="report_env.py",
            source_dir=EXAMPLES / "scripts",
            instance_type="local",
            instance_count=2,
            hyperparameters={"epochs": 2},
            base_job_name="sdk",
            client=client,
        )
        job = estimator.fit({"train": str(data)}, echo=printed.append)
    assert job["status"] == "Completed"
    assert job["name"].startswith("sdk-")
    assert any(
        line.startswith('[algo-2] seen {"epochs": 2, "files": ["part-0.csv"]') for line in printed
    )
    assert estimator.model_data
    assert estimator.model_data.endswith("/output/model.tar.gz")


def test_estimator_raises_when_the_job_fails(stack: Stack) -> None:
    with stack.client() as client:
        estimator = Estimator(
            entry_point="fail.py",
            source_dir=EXAMPLES / "scripts",
            instance_type="local",
            client=client,
        )
        with pytest.raises(JobFailedError, match="FileNotFoundError"):
            estimator.fit(logs=False)
