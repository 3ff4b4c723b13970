"""Checkpoints through the instance entry point, as a real process: restored before the
script starts, stored after it ends however it ends."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.instances import launch_request, start_runtime, write_instances

RESUMING_SCRIPT = """
import os, sys
ckpt = os.environ["SM_CHECKPOINT_DIR"]
with open(os.path.join(ckpt, "epoch-1.pt"), "rb") as f:
    assert f.read() == b"restored", "not restored"
os.makedirs(os.path.join(ckpt, "shards"))
with open(os.path.join(ckpt, "shards", "rank-0.pt"), "wb") as f:
    f.write(b"shard")
with open(os.path.join(ckpt, "epoch-2.pt"), "wb") as f:
    f.write(b"two")
print("saved", flush=True)
sys.exit(int(sys.argv[-1]))
"""


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def _source(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    return source


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_job_resumes_from_its_checkpoints_and_stores_new_ones(
    tmp_path: Path, exit_code: int
) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "epoch-1.pt").write_bytes(b"restored")
    request = launch_request(
        _source(tmp_path, RESUMING_SCRIPT),
        checkpoint_s3_uri=kept.as_uri(),
        hyperparameters={"exit-code": exit_code},
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]

    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)

    assert process.returncode == exit_code, output
    assert "[stdout] saved" in output
    assert f"Restored 1 checkpoint file(s), 8 bytes, from {kept.as_uri()}" in output
    # Stored whether the script succeeded or failed.
    assert _files(kept) == {
        "epoch-1.pt": b"restored",
        "epoch-2.pt": b"two",
        "shards/rank-0.pt": b"shard",
    }
    assert "Final checkpoint sync stored " in output
    # Restored files are not uploaded back.
    assert "Checkpoint epoch-1.pt stored" not in output


def test_a_stopped_job_stores_what_its_script_saved_on_sigterm(tmp_path: Path) -> None:
    script = """
import os, signal, sys, time
def save_and_exit(signum, frame):
    with open(os.path.join(os.environ["SM_CHECKPOINT_DIR"], "on-stop.pt"), "wb") as f:
        f.write(b"saved on stop")
    sys.exit(0)
signal.signal(signal.SIGTERM, save_and_exit)
print("training", flush=True)
time.sleep(60)
"""
    kept = tmp_path / "kept"
    request = launch_request(_source(tmp_path, script), checkpoint_s3_uri=kept.as_uri())
    base = write_instances(tmp_path / "job", request)["algo-1"]

    process = start_runtime(base)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "[stdout] training" in line:
            break
    process.send_signal(signal.SIGTERM)
    output = "".join(lines) + process.communicate(timeout=60)[0]

    assert process.returncode == 0, output
    assert f"No checkpoints under {kept.as_uri()} yet: starting fresh" in output
    assert _files(kept) == {"on-stop.pt": b"saved on stop"}
    assert output.index("Final checkpoint sync stored") < output.index("[runtime] Stopped")


def test_a_checkpoint_uri_that_cannot_be_read_fails_the_job_before_training(
    tmp_path: Path,
) -> None:
    request = launch_request(_source(tmp_path, "print('trained')"))
    base = write_instances(tmp_path / "job", request)["algo-1"]
    config_file = base / "input" / "config" / "runyard.json"
    config = json.loads(config_file.read_text())
    spec = {**config["spec"], "checkpoint_s3_uri": "gs://bucket/ckpt"}
    config_file.write_text(json.dumps({**config, "spec": spec}))

    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 1, output
    assert (base / "output" / "failure").read_text() == (
        "ClientError: restoring checkpoints: 'gs://bucket/ckpt': unsupported scheme "
        "(this server supports file://, s3://)"
    )
    assert "trained" not in output


def test_without_a_checkpoint_uri_nothing_is_synced(tmp_path: Path) -> None:
    script = "import os; open(os.environ['SM_CHECKPOINT_DIR'] + '/x.pt', 'w').write('x')"
    base = write_instances(tmp_path / "job", launch_request(_source(tmp_path, script)))["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert (base / "checkpoints" / "x.pt").exists()
    for phrase in ("No checkpoints", "Restored", "Uploading checkpoints", "checkpoint sync"):
        assert phrase not in output


BUCKET = "checkpoints"
ODD_NAME_SCRIPT = """
import os
ckpt = os.fsencode(os.environ["SM_CHECKPOINT_DIR"])
with open(os.path.join(ckpt, b"caf\\xe9.pt"), "wb") as f:  # not UTF-8: no S3 key
    f.write(b"latin-1 name")
with open(os.path.join(ckpt, b"model.pt"), "wb") as f:
    f.write(b"model")
"""


def test_a_checkpoint_s3_cannot_store_does_not_fail_a_finished_job(
    tmp_path: Path, s3_client: Any
) -> None:
    s3_client.create_bucket(Bucket=BUCKET)
    request = launch_request(
        _source(tmp_path, ODD_NAME_SCRIPT), checkpoint_s3_uri=f"s3://{BUCKET}/job"
    )
    base = write_instances(tmp_path / "job", request)["algo-1"]

    # Strict UTF-8 output, as under most locales: the odd name must not break the log.
    process = start_runtime(base, PYTHONIOENCODING="utf-8")
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 0, output
    assert not (base / "output" / "failure").exists()
    assert f"Could not store checkpoint at s3://{BUCKET}/job/caf\\xe9.pt: " in output
    assert "1 could not be stored" in output
    assert s3_client.get_object(Bucket=BUCKET, Key="job/model.pt")["Body"].read() == b"model"
