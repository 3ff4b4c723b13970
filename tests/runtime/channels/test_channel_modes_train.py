"""Input modes through the instance entry point as a real process: the script reads Pipe
FIFOs and a FastFile mount, the runtime cleans both up however it ends, and data that
cannot be delivered fails the job with a reason naming the object."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from contract import storage
from runtime.channels import fastfile
from runtime.linux import mounts
from tests.channels import gzipped
from tests.instances import launch_request, start_runtime, write_instances

READ_PIPES = """
import json, os
data = os.environ["SM_CHANNEL_TRAIN"]
epochs = []
for epoch in range(2):
    with open(f"{data}_{epoch}", "rb") as fifo:
        epochs.append(fifo.read().decode())
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(epochs, f)
print("trained", flush=True)
"""

READ_MOUNT = """
import json, os
data = os.environ["SM_CHANNEL_TRAIN"]
seen = {}
for name in sorted(os.listdir(data)):
    with open(os.path.join(data, name)) as f:
        seen[name] = f.read()
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
print("trained", flush=True)
"""


def _run(tmp_path: Path, script: str, inputs: dict[str, object]) -> tuple[Path, int, str]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    base = write_instances(tmp_path / "job", launch_request(source, inputs=inputs))["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    return base, process.returncode, output


def _seen(tmp_path: Path) -> object:
    model = tmp_path / "artifacts" / "job-1" / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        member = tar.extractfile("seen.json")
        assert member is not None
        return json.load(member)


def _data(tmp_path: Path, content: dict[str, bytes]) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for name, data in content.items():
        (root / name).write_bytes(data)
    return root


def test_a_script_reads_two_epochs_from_pipe_fifos(tmp_path: Path) -> None:
    data = _data(tmp_path, {"b.gz": gzipped(b"second "), "a.gz": gzipped(b"first ")})
    inputs = {"train": {"uri": data.as_uri(), "input_mode": "Pipe", "compression": "Gzip"}}
    base, code, output = _run(tmp_path, READ_PIPES, inputs)
    assert code == 0, output
    assert _seen(tmp_path) == ["first second ", "first second "]
    assert "Fetching channel train from file://" in output
    assert "(Pipe mode)" in output
    # The writer is gone and so are its FIFOs.
    assert list((base / "input" / "data").iterdir()) == []


@pytest.mark.skipif(
    not os.path.exists(fastfile.DEVICE) or os.geteuid() != 0,
    reason="FUSE mounts need /dev/fuse and root",
)
def test_a_script_reads_a_fastfile_mount_that_is_gone_after_the_run(tmp_path: Path) -> None:
    data = _data(tmp_path, {"x.csv": b"1,2\n", "y.csv": b"3,4\n"})
    inputs = {"train": {"uri": data.as_uri(), "input_mode": "FastFile"}}
    base, code, output = _run(tmp_path, READ_MOUNT, inputs)
    assert code == 0, output
    assert _seen(tmp_path) == {"x.csv": "1,2\n", "y.csv": "3,4\n"}
    assert "Channel train: 2 files mounted at" in output
    assert mounts.unmount_under(base) == []  # nothing was left mounted
    assert sorted(os.listdir(base / "input" / ".fastfile" / "train")) == ["x.csv", "y.csv"]


def test_a_corrupt_gzip_object_fails_the_job_before_training(tmp_path: Path) -> None:
    data = _data(tmp_path, {"good.gz": gzipped(b"ok"), "bad.gz": b"not gzip"})
    inputs = {"train": {"uri": data.as_uri(), "compression": "Gzip"}}
    base, code, output = _run(tmp_path, READ_MOUNT, inputs)
    assert code == 1, output
    reason = (base / "output" / "failure").read_text()
    bad = (data / "bad.gz").as_uri()
    assert reason.startswith(f"ClientError: Data download failed: channel train: {bad}: not a")
    assert "Starting" not in output


def test_a_pipe_that_could_not_deliver_fails_the_job_though_the_script_succeeded(
    tmp_path: Path,
) -> None:
    script = (
        "import os\n"
        "with open(os.environ['SM_CHANNEL_TRAIN'] + '_0', 'rb') as f:\n"
        "    print('read', len(f.read()), flush=True)\n"
    )
    data = _data(tmp_path, {"a.gz": gzipped(b"fine"), "b.gz": b"corrupt"})
    inputs = {"train": {"uri": data.as_uri(), "input_mode": "Pipe", "compression": "Gzip"}}
    base, code, output = _run(tmp_path, script, inputs)
    assert code == 1, output
    assert "[stdout] read 4" in output
    reason = (base / "output" / "failure").read_text()
    assert reason.startswith(f"ClientError: {(data / 'b.gz').as_uri()}: not a valid gzip object")
    assert not storage.exists((tmp_path / "artifacts" / "job-1").as_uri())
