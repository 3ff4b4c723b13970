"""An instance handed to the job's user: it owns what its processes write in /opt/ml,
links included as links (never their targets), while the runtime's own directory, /opt/ml
itself and whatever a link points at stay root's."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from runtime.instance import job_user
from runtime.launch import as_job_user
from runtime.launch.workers import Launch, WorkerSpec
from runtime.linux.confine import CONFINER_PATH, JOB_USER_NAME, job_uid
from tests.channels import instance_configs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="handing files over takes root")


def _owner(path: Path) -> int:
    return os.lstat(path).st_uid


def test_the_job_owns_what_it_writes_and_the_runtime_keeps_its_own(tmp_path: Path) -> None:
    [config] = instance_configs(tmp_path, {})
    base = config.paths.base
    outside = tmp_path / "outside"
    outside.write_text("root's")
    (config.paths.code / "train.py").write_text("print()\n")
    (config.paths.code / "link").symlink_to(outside)
    (config.paths.data / "train").mkdir()
    (config.paths.data / "train" / "part-0").write_text("data")
    (config.paths.data / "train" / "part-0").chmod(0o600)
    os.mkfifo(config.paths.data / "pipe_0", 0o644)
    runtime_dir = base / job_user.RUNTIME_DIR
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
    (runtime_dir / "hosts").write_text("127.0.0.1 localhost\n")
    (base / job_user.AGENT_KEY).write_bytes(b"key")
    layer = base / ".runyard" / "env"
    (layer / "bin").mkdir(parents=True)
    uid = job_uid(config.job_id)

    job_user.hand_over(config, uid, layer)

    for path in (
        config.paths.code / "train.py",
        config.paths.code / "link",  # the link itself
        config.paths.model,
        config.paths.output_data,
        config.paths.checkpoints,
        layer / "bin",
        base / job_user.HOME,
        base / job_user.AGENT_KEY,
        *(base / note for note in job_user.AGENT_NOTES),
    ):
        assert _owner(path) == uid, path
    # What stays root's: the link's target, /opt/ml itself, the runtime's directory (the
    # job may pass through, not list nor write it) and what the runtime wrote there.
    assert _owner(outside) == _owner(base) == _owner(runtime_dir) == 0
    assert _owner(runtime_dir / "hosts") == 0
    # input/ is root's and sticky (the job writes beside its config, and cannot move
    # input/data, where the runtime makes FIFOs).
    assert _owner(config.paths.input) == _owner(config.paths.data) == 0
    assert stat.S_IMODE(os.stat(config.paths.input).st_mode) == 0o1777
    # What a File channel holds is the job's; a Pipe channel's FIFO stays root's.
    assert _owner(config.paths.data / "train" / "part-0") == uid
    assert _owner(config.paths.data / "pipe_0") == 0
    assert stat.S_IMODE(os.stat(runtime_dir).st_mode) == 0o711
    scratch = os.stat(base / job_user.SCRATCH)
    assert (scratch.st_uid, stat.S_IMODE(scratch.st_mode)) == (0, 0o1777)
    assert stat.S_IMODE(os.stat(base / job_user.HOME).st_mode) == 0o700


def test_each_process_is_started_confined_in_the_jobs_users_environment(tmp_path: Path) -> None:
    [config] = instance_configs(tmp_path, {})
    how = job_user.confinement(config, [Path("/usr")])
    assert how.uid == job_uid(config.job_id)
    assert how.private == {"/tmp": str(config.paths.base / job_user.SCRATCH)} | {
        "/var/tmp": str(config.paths.base / job_user.SCRATCH)
    }
    (config.paths.base / job_user.RUNTIME_DIR).mkdir(exist_ok=True)
    spec = WorkerSpec(["python", "train.py"], {"HOME": "/root", "PATH": "/usr/bin"}, Path("/"))
    [confined] = as_job_user.confined(Launch([spec]), how, config).specs
    assert confined.argv[-3:] == ["--", "python", "train.py"]
    assert confined.argv[1:4] == ["-I", "-m", "runtime.linux.confine"]
    # The confining interpreter gets nothing of the job's environment; the job's process
    # gets it whole, from a file of root's in the runtime's own directory.
    assert confined.env == {"PATH": CONFINER_PATH}
    handed = Path(confined.argv[5])
    assert handed.parent == config.paths.base / job_user.RUNTIME_DIR
    assert stat.S_IMODE(handed.stat().st_mode) == 0o600
    assert json.loads(handed.read_text()) == {
        "HOME": str(config.paths.base / job_user.HOME),
        "PATH": "/usr/bin",
        "USER": JOB_USER_NAME,
        "LOGNAME": JOB_USER_NAME,
    }


def test_pip_may_read_local_wheel_directories_inside_the_file_roots_only(
    tmp_path: Path,
) -> None:
    [config] = instance_configs(tmp_path, {})
    roots, home = tmp_path / "roots", tmp_path / "roots" / "server-home"
    wheels, outside, above_home = roots / "wheels", tmp_path / "elsewhere", roots
    for directory in (wheels, outside, home):
        directory.mkdir(parents=True, exist_ok=True)
    config = dataclasses.replace(config, file_roots=(str(roots),), hidden_paths=(str(home),))
    env = {
        "PIP_FIND_LINKS": f"{wheels} {outside} https://example.com/wheels",
        "PIP_INDEX_URL": f"file://{above_home}",  # holds the server's home: never shown
        "PIP_EXTRA_INDEX_URL": f"file://{roots / 'missing'}",
    }
    assert job_user.local_pip_sources(env, config) == [wheels]


def test_pip_may_read_local_wheels_a_project_was_granted_to_read(tmp_path: Path) -> None:
    """A project other than default: its instances' roots are its own places, read-only
    grants among them; a directory of the server's file roots not granted is not shown."""
    [config] = instance_configs(tmp_path, {})
    own, granted, not_granted = tmp_path / "own", tmp_path / "team-wheels", tmp_path / "other"
    for directory in (own, granted, not_granted):
        directory.mkdir()
    config = dataclasses.replace(
        config, file_roots=(str(own),), read_only_roots=(str(granted),), confine_files=True
    )
    env = {"PIP_FIND_LINKS": f"{granted} {not_granted}"}
    assert job_user.local_pip_sources(env, config) == [granted]
