"""The local backend's teardown takes down the FastFile mounts a killed runtime left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from provisioning.base import JobRef
from provisioning.local.backend import LocalBackend
from runtime.channels import fastfile
from runtime.linux import mounts

# A stand-in for a runtime with a FastFile channel: it mounts, says so, and waits.
MOUNTING_RUNTIME = """
import sys
from pathlib import Path
from runtime.channels import fastfile
from runtime.channels.channel_data import ChannelObject
mountpoint, cache = Path(sys.argv[1]), Path(sys.argv[2])
fastfile.FastFileChannel("train", [ChannelObject("file:///unused", "x", 1)], mountpoint, cache,
                         print).mount()
print("mounted", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(
    not os.path.exists(fastfile.DEVICE) or os.geteuid() != 0,
    reason="FUSE mounts need /dev/fuse and root",
)
def test_teardown_unmounts_what_a_killed_runtime_left_mounted(tmp_path: Path) -> None:
    job = JobRef(uuid.uuid4().hex, "job-1")  # its own: teardown ends any process marked so
    job_dir = tmp_path / "jobs" / job.id  # a job is kept under its id
    base = job_dir / "algo-1"
    mountpoint = base / "input" / "data" / "train"
    runtime = subprocess.Popen(
        [sys.executable, "-c", MOUNTING_RUNTIME, str(mountpoint), str(base / "cache")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runtime.stdout is not None
        assert runtime.stdout.readline() == "mounted\n"
    finally:
        runtime.send_signal(signal.SIGKILL)  # no chance to unmount
        runtime.communicate(timeout=30)
    try:
        # Left behind, served by no one: the directory cannot even be looked into.
        assert mountpoint.resolve().as_posix() in mounts.mount_points()
        with pytest.raises(OSError, match="Transport endpoint is not connected"):
            os.listdir(mountpoint)

        LocalBackend(tmp_path / "jobs", python=sys.executable).teardown(job)

        assert mounts.unmount_under(tmp_path) == []
        assert not job_dir.exists()
    finally:
        mounts.unmount_under(tmp_path)


def test_unmount_under_reads_escaped_mount_points(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 0:21 / / rw - ext4 /dev/root rw\n"
        "36 22 0:40 / /tmp/job\\040one/algo-1/input/data/train ro,nosuid - fuse.runyard runyard "
        "rw,user_id=0\n"
    )
    assert mounts.mount_points(table) == ["/", "/tmp/job one/algo-1/input/data/train"]
    assert mounts.mount_points(tmp_path / "no-such-table") == []
