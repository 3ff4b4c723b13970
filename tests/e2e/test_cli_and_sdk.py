"""The CLI and the SDK as users run them, against a running stack."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from runyard import Estimator, JobFailedError, TrainingInput
from runyard.pytorch import PyTorch
from runyard.tensorflow import TensorFlow
from tests.e2e.conftest import EXAMPLES, Stack

pytestmark = pytest.mark.e2e
# An operator's mapping of the framework versions that SageMaker code names here, and the
# catalog lacks, to the built-in image.
STACK_SETTINGS = {
    "RUNYARD_IMAGE_ALIASES": '{"pytorch:2.3": "builtin", "tensorflow:2.16": "builtin"}'
}


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
    # Named by the flag that gave it, not by the API's field.
    assert bad.stderr.strip().startswith(
        "error: --instance-count: Input should be greater than or equal to 1"
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


def test_dry_run_prints_the_resolved_job_or_the_plan_and_creates_nothing(stack: Stack) -> None:
    args = ["submit", "--name", "dry-1", "-s", str(EXAMPLES / "scripts"), "-e", "fail.py"]
    args += ["-t", "local", "-n", "2", "--env", "API_TOKEN=secret", "--env", "MODE=fast"]
    result = _runyard(stack, *args, "--dry-run")
    assert result.returncode == 0, result.stderr
    # The job as it would be stored: the request with every default filled, the image
    # chosen, its hosts; a credential in its environment masked.
    resolved = yaml.safe_load(result.stdout)
    assert (resolved["name"], resolved["backend"]) == ("dry-1", "local")
    assert resolved["hosts"] == ["algo-1", "algo-2"]
    spec = resolved["spec"]
    assert (spec["entry_point"], spec["instance_count"], spec["max_run"]) == ("fail.py", 2, 86400)
    assert spec["image"]["name"]
    assert spec["environment"] == {"API_TOKEN": "<redacted>", "MODE": "fast"}
    assert spec["output_path"].startswith("file://")
    assert "unshare" not in result.stdout

    # The backend's plan, with --plan.
    planned = _runyard(stack, *args, "--plan")
    assert planned.returncode == 0, planned.stderr
    assert "RUNYARD_JOB_TOKEN: <redacted>" in planned.stdout
    assert "input/config/resourceconfig.json: |" in planned.stdout
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
        "interrupt",
        "token",
        "url",
        "tune",
        "tuning",
        "tuning list",
        "tuning describe",
        "tuning stop",
    ]
    for command in [None, *commands]:
        args = [sys.executable, "-m", "runyard", *(command.split() if command else []), "--help"]
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


def _stored_sources(stack: Stack) -> list[str]:
    folder = stack.home / "artifacts" / "_sources"
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def _code(tmp_path: Path, marker: str, extra_bytes: int = 0) -> Path:
    """Code no other test uploads (so whether it is stored is this test's doing)."""
    code = tmp_path / f"code-{marker}"
    shutil.copytree(EXAMPLES / "scripts", code)
    (code / "marker.txt").write_text(marker)
    if extra_bytes:
        # Random, so that compression leaves it as large as it is.
        (code / "weights.bin").write_bytes(os.urandom(extra_bytes))
    return code


def test_a_dry_run_stores_no_code(stack: Stack, tmp_path: Path) -> None:
    code = _code(tmp_path, "dry-run")
    before = _stored_sources(stack)
    args = ["submit", "--name", "dry-2", "-s", str(code), "-e", "report_env.py", "-t", "local"]
    planned = _runyard(stack, *args, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert _stored_sources(stack) == before
    uri = re.search(r"file://\S*/_sources/[0-9a-f]{64}\.tar\.gz", planned.stdout)
    assert uri, planned.stdout

    # What the plan showed is where the code goes when the job is submitted.
    submitted = _runyard(stack, *args)
    assert submitted.returncode == 0, submitted.stderr
    with stack.client() as client:
        assert client.get_job("dry-2")["spec"]["source_uri"] == uri.group(0)
    assert len(_stored_sources(stack)) == len(before) + 1

    missing = _runyard(stack, "submit", "-s", str(code), "-e", "nope.py", "-t", "local")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"error: entry_point: nope.py is not a file in {code}"


def test_flags_override_the_spec_file_name_or_prefix(stack: Stack, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"base_job_name: from-file\nsource_dir: {EXAMPLES / 'scripts'}\n"
        "entry_point: report_env.py\ninstance_type: local\n"
    )
    named = _runyard(stack, "submit", str(spec), "--name", "flag-wins")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == "Submitted training job flag-wins"

    spec.write_text(spec.read_text().replace("base_job_name: from-file", "name: from-file"))
    prefixed = _runyard(stack, "submit", str(spec), "--base-job-name", "flag-prefix")
    assert prefixed.returncode == 0, prefixed.stderr
    assert prefixed.stdout.startswith("Submitted training job flag-prefix-")

    # Code already stored, named by a flag, instead of the file's source_dir.
    stored = (EXAMPLES / "scripts").as_uri()
    elsewhere = _runyard(stack, "submit", str(spec), "--name", "flag-uri", "--source-uri", stored)
    assert elsewhere.returncode == 0, elsewhere.stderr
    with stack.client() as client:
        assert client.get_job("flag-uri")["spec"]["source_uri"] == stored


def _on_a_terminal(stack: Stack, *args: str) -> tuple[int, str]:
    """Runs the CLI with its stderr on a pseudo-terminal; returns what the terminal got."""
    env = {k: v for k, v in stack.env.items() if not k.startswith("RUNYARD_")}
    env["RUNYARD_HOME"] = str(stack.home)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "runyard", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return process.wait(timeout=120), shown.decode(errors="replace")


def test_a_large_upload_shows_its_progress(stack: Stack, tmp_path: Path) -> None:
    code = _code(tmp_path, "large", extra_bytes=3 << 20)
    args = ["submit", "-s", str(code), "-e", "report_env.py", "-t", "local", "--dry-run"]
    # In a log: one line that says what goes up.
    logged = _runyard(stack, *args)
    assert logged.returncode == 0, logged.stderr
    assert re.fullmatch(rf"Uploading {re.escape(str(code))} \(3\.0 MiB\)\n", logged.stderr)
    # On a terminal: a bar that fills.
    status, shown = _on_a_terminal(stack, *args)
    assert status == 0, shown
    assert re.search(r"Uploading .* \(3\.0 MiB\) +\[#+\] +100%", shown), shown

    # Small code goes up without a word.
    small = _runyard(stack, "submit", "-s", str(EXAMPLES / "scripts"), *args[3:])
    assert small.returncode == 0, small.stderr
    assert small.stderr == ""


def test_logs_with_timestamps(stack: Stack) -> None:
    plain = _runyard(stack, "logs", "cli-1").stdout.splitlines()
    stamped = _runyard(stack, "logs", "cli-1", "--timestamps").stdout.splitlines()
    assert len(stamped) == len(plain) > 0
    for line, without in zip(stamped, plain, strict=True):
        when, _, rest = line.partition(" ")
        assert rest == without
        datetime.fromisoformat(when)
    followed = _runyard(stack, "logs", "cli-1", "-f", "--timestamps").stdout.splitlines()
    assert followed == stamped


def test_logs_of_a_host_the_job_does_not_have_are_an_error(stack: Stack) -> None:
    for follow in ([], ["-f"]):
        result = _runyard(stack, "logs", "cli-1", "--host", "algo-7", *follow)
        assert result.returncode == 1, (follow, result.stdout)
        assert result.stderr.startswith("error: "), (follow, result.stderr)
        assert "algo-7" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_url_prints_the_server_the_cli_uses(stack: Stack) -> None:
    assert _runyard(stack, "url").stdout.strip() == stack.url


def _shards(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for index in range(4):
        (data / f"part-{index}.csv").write_text(f"{index}\n")
    return data


def test_sagemaker_code_runs_with_its_imports_changed(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = _shards(tmp_path)
    printed: list[str] = []
    with stack.client() as client, caplog.at_level(logging.WARNING, logger="runyard"):
        estimator = PyTorch(
            entry_point="report_env.py",
            source_dir=str(EXAMPLES / "scripts"),
            role="arn:aws:iam::111122223333:role/SageMakerRole",
            framework_version="2.3",
            py_version="py311",
            instance_type="local",
            instance_count=2,
            base_job_name="sm-compat",
            hyperparameters={"epochs": 1},
            client=client,
        )
        job = estimator.fit(
            {"train": TrainingInput(str(data), distribution="ShardedByS3Key")},
            logs="All",
            echo=printed.append,
        )
    assert [record.getMessage() for record in caplog.records] == [
        "PyTorch: Runyard does not use role; ignored"
    ]
    # The job's name comes first, before any line of it.
    assert printed[0] == f"Submitted training job {job['name']}"
    assert job["name"].startswith("sm-compat-")
    # Sharded by key: object i goes to instance i mod 2.
    assert any(
        '[algo-1] seen {"epochs": 1, "files": ["part-0.csv", "part-2.csv"]' in line
        for line in printed
    )
    assert any(
        '[algo-2] seen {"epochs": 1, "files": ["part-1.csv", "part-3.csv"]' in line
        for line in printed
    )
    assert job["spec"]["framework_version"] == "2.3"
    assert job["image"] == "builtin"


def test_fit_takes_channel_dicts_and_a_tensorflow_estimator(stack: Stack, tmp_path: Path) -> None:
    data = _shards(tmp_path)
    printed: list[str] = []
    with stack.client() as client:
        estimator = TensorFlow(
            "py310",
            "2.16",
            entry_point="report_env.py",
            source_dir=EXAMPLES / "scripts",
            instance_type="local",
            input_mode="FastFile",
            client=client,
        )
        job = estimator.fit(
            {"train": {"uri": str(data), "distribution": "ShardedByS3Key"}},
            wait=False,
            echo=printed.append,
        )
        assert printed == [f"Submitted training job {job['name']}"]
        assert job["spec"]["framework"] == "tensorflow"
        assert job["spec"]["inputs"]["train"] == {
            "uri": data.as_uri(),
            "distribution": "ShardedByS3Key",
            "input_mode": "FastFile",
            "s3_data_type": "S3Prefix",
            "content_type": None,
            "compression": "None",
        }
        assert stack.wait_until_ended(client, job["name"])["status"] == "Completed"


SDK_SCRIPT = """
import sys
from runyard import Client, Estimator

with Client(sys.argv[1], sys.argv[2]) as client:
    Estimator(
        "long_running.py", source_dir=sys.argv[3], instance_type="local", client=client
    ).fit(echo=lambda line: print(line, flush=True))
"""


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_fit_says_the_job_keeps_running_and_how_to_stop_it(
    stack: Stack, tmp_path: Path
) -> None:
    script = tmp_path / "fit.py"
    script.write_text(SDK_SCRIPT)
    with stack.client() as client:
        fitting = subprocess.Popen(
            [sys.executable, str(script), stack.url, client.token or "", str(EXAMPLES / "scripts")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as a terminal delivers it, even where this suite runs in the background
            # (a shell's background job ignores SIGINT, and its children inherit that).
            preexec_fn=_sigint_as_at_a_terminal,
        )
        assert fitting.stdout is not None
        name = fitting.stdout.readline().strip().removeprefix("Submitted training job ")
        # Watching: the script's first lines have come through.
        for line in fitting.stdout:
            if "tick 0" in line:
                break
        fitting.send_signal(signal.SIGINT)
        try:
            rest, errors = fitting.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            # Nothing of this test outlives it: the client, then its job.
            fitting.kill()
            said = fitting.communicate()
            client.stop_job(name)
            stack.wait_until_ended(client, name)
            raise AssertionError(f"fit() went on after Ctrl-C: {said}") from None
        assert fitting.returncode != 0
        assert f"{name} keeps running; `runyard stop {name}` stops it." in rest.splitlines()
        assert "KeyboardInterrupt" in errors
        assert client.get_job(name)["status"] == "InProgress"
        client.stop_job(name)
        assert stack.wait_until_ended(client, name)["status"] == "Stopped"


def test_submit_reads_a_distribution_from_the_sdks_hyperparameters(stack: Stack) -> None:
    common = [
        "submit",
        "--source-dir",
        str(EXAMPLES / "scripts"),
        "--entry-point",
        "mpi_hello.py",
        "--instance-type",
        "local",
        "--instance-count",
        "2",
        "-H",
        "sagemaker_mpi_enabled=true",
        "-H",
        "sagemaker_mpi_num_of_processes_per_host=2",
    ]
    refused = _runyard(stack, *common, "--distribution", '{"torch_distributed": {"enabled": true}}')
    assert refused.returncode != 0
    assert "sagemaker_mpi_enabled" in refused.stderr, refused.stderr
    assert "torch_distributed" in refused.stderr

    submitted = _runyard(stack, *common, "--name", "cli-flags", "--wait", "--logs")
    assert submitted.returncode == 0, submitted.stderr
    ranks = re.findall(r'mpi \{.*"rank": (\d)', submitted.stdout)
    assert sorted(ranks) == ["0", "1", "2", "3"], submitted.stdout


METRICS_SCRIPT = """
for epoch, loss in enumerate([0.9, 0.5, 0.25]):
    print(f"epoch {epoch} loss: {loss}", flush=True)
"""


def test_an_estimator_attaches_to_a_job_it_did_not_wait_for(stack: Stack, tmp_path: Path) -> None:
    code = tmp_path / "metrics-code"
    code.mkdir()
    (code / "train.py").write_text(METRICS_SCRIPT)
    printed: list[str] = []
    with stack.client() as client:
        estimator = PyTorch(
            entry_point="train.py",
            source_dir=code,
            framework_version="2.3",
            py_version="py311",
            instance_type="local",
            metric_definitions=[{"Name": "loss", "Regex": r"loss: ([0-9.]+)"}],
            tags={"suite": "e2e"},
            client=client,
        )
        estimator.fit(wait=False, echo=printed.append)
        assert estimator.latest_training_job is not None
        name = estimator.latest_training_job.name
        # As in SageMaker, attaching waits for the job to end, without its lines.
        attached = PyTorch.attach(name, client=client)
        assert printed == [f"Submitted training job {name}"]
        attached.logs(echo=printed.append)
        frame = attached.training_job_analytics.dataframe()
        assert estimator.latest_training_job.describe()["spec"]["tags"] == [
            {"key": "suite", "value": "e2e"}
        ]
    assert "[algo-1] epoch 2 loss: 0.25" in printed
    assert f"Training job {name} ended: Completed (Completed)" in printed
    assert attached.model_data is not None
    assert attached.model_data == estimator.model_data
    # Three points, averaged per minute: one row, or two if they straddle a minute.
    assert list(frame.columns) == ["timestamp", "metric_name", "value"]
    assert set(frame["metric_name"]) == {"loss"}
    assert frame["timestamp"].iloc[0] == 0.0
    assert 1 <= len(frame) <= 2
    assert frame["value"].between(0.25, 0.9).all()
