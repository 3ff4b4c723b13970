"""TensorBoard data through the instance entry point, as a real process: what the script
writes in its TensorBoard directory is stored below ``<uri>/<job>/tensorboard-output``,
as SageMaker stores a job's TensorBoardOutputConfig, and nothing the job links there."""

from __future__ import annotations

import json
from pathlib import Path

from tests.instances import launch_request, start_runtime, write_instances

WRITING_SCRIPT = """
import json, os
config_dir = os.environ["SM_INPUT_CONFIG_DIR"]
config = json.load(open(os.path.join(config_dir, "tensorboardoutputconfig.json")))
# The local path as the script sees it; this instance's base directory stands for /opt/ml.
below = os.path.relpath(config["LocalPath"], "/opt/ml/output")
local = os.path.join(os.environ["SM_OUTPUT_DIR"], below)
os.makedirs(os.path.join(local, "train"))
with open(os.path.join(local, "train", "events.out.tfevents.1"), "wb") as f:
    f.write(b"scalars")
print("wrote", config["S3OutputPath"], flush=True)
"""


def _source(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "src"
    source.mkdir(parents=True)
    (source / "train.py").write_text(script)
    return source


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_what_the_script_writes_for_tensorboard_is_stored_below_the_jobs_folder(
    tmp_path: Path,
) -> None:
    stored = tmp_path / "tensorboard"
    request = launch_request(
        _source(tmp_path, WRITING_SCRIPT), tensorboard_s3_output_path=stored.as_uri()
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    written = json.loads((base / "input" / "config" / "tensorboardoutputconfig.json").read_text())
    assert written == {"LocalPath": "/opt/ml/output/tensorboard", "S3OutputPath": stored.as_uri()}

    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 0, output
    assert f"[stdout] wrote {stored.as_uri()}" in output
    assert "Uploading TensorBoard files from /opt/ml/output/tensorboard to " in output
    # Where the SageMaker SDK's latest_job_tensorboard_artifacts_path() looks.
    assert _files(stored) == {"job-1/tensorboard-output/train/events.out.tfevents.1": b"scalars"}
    assert "Final TensorBoard file sync stored " in output


def test_a_local_path_of_the_jobs_own_is_used_and_no_file_is_written_without_tensorboard(
    tmp_path: Path,
) -> None:
    stored = tmp_path / "tensorboard"
    request = launch_request(
        _source(tmp_path, WRITING_SCRIPT),
        tensorboard_s3_output_path=stored.as_uri(),
        tensorboard_local_path="/opt/ml/output/tb/logs",
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert (base / "output" / "tb" / "logs" / "train" / "events.out.tfevents.1").is_file()
    assert list(_files(stored)) == ["job-1/tensorboard-output/train/events.out.tfevents.1"]

    plain = launch_request(_source(tmp_path / "plain", "print('x')"))
    plain_base = write_instances(tmp_path / "plain-job", plain)["algo-1"]
    assert not (plain_base / "input" / "config" / "tensorboardoutputconfig.json").exists()
    process = start_runtime(plain_base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "TensorBoard" not in output


def test_a_directory_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    # The job moves its TensorBoard directory aside and links the name to something that
    # is not its own: the runtime, which is root, stores from the directory it opened,
    # and never what the link leads to.
    secret = tmp_path / "server-secrets"
    secret.mkdir()
    (secret / "key.pem").write_text("do not store")
    script = f"""
import os
tensorboard = os.path.join(os.environ["SM_OUTPUT_DIR"], "tensorboard")
os.rename(tensorboard, tensorboard + ".aside")
os.symlink({str(secret)!r}, tensorboard)
with open(os.path.join(tensorboard + ".aside", "events.out"), "wb") as f:
    f.write(b"mine")
"""
    stored = tmp_path / "tensorboard"
    request = launch_request(_source(tmp_path, script), tensorboard_s3_output_path=stored.as_uri())
    base = write_instances(tmp_path / "job", request)["algo-1"]

    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 0, output
    assert _files(stored) == {"job-1/tensorboard-output/events.out": b"mine"}
