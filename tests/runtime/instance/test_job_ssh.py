"""An instance readied for SSH between its job's hosts (``runtime.instance.job_ssh``) and
given its own /etc files (``runtime.instance.own_etc``), in a mount namespace of its own
as an instance's runtime is: what the job's processes then see of /etc/ssh, /etc/passwd
and /etc/environment, what the job's user finds in its home, and that the machine's own
files never change, whatever the job left in its home before."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from contract import ssh
from contract.instance_config import InstanceConfig
from provisioning.local import ssh_keys
from runtime.instance import job_ssh, job_user
from runtime.linux.confine import job_uid
from tests.channels import instance_configs

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or ssh_keys.unavailable() is not None,
    reason="needs root, util-linux's unshare and Debian's openssh-server",
)

# Run in a mount namespace of its own: the instance's files shown there, and what its
# /etc then holds.
PREPARE = """
import dataclasses, json, os, sys
from pathlib import Path
from contract.instance_config import load
from runtime.instance import job_ssh, job_user, own_etc

base, uid = Path(sys.argv[1]), int(sys.argv[2])
config = dataclasses.replace(load(base), ssh=True, network_namespace=None)
job_user.hand_over(config, uid, base / ".runyard" / "env")
own_etc.show(config, uid, {"PATH": "/image/bin:/usr/bin:/bin"})
job_ssh.prepare(config, uid)
etc_ssh = Path("/etc/ssh")
print(json.dumps({
    "etc_ssh": sorted(path.name for path in etc_ssh.iterdir()),
    "host_key_owner": (etc_ssh / "ssh_host_ed25519_key").stat().st_uid,
    "authorized_keys": (etc_ssh / "authorized_keys").read_text(),
    "known_hosts": (etc_ssh / "ssh_known_hosts").read_text(),
    "passwd": Path("/etc/passwd").read_text().splitlines()[-1],
    "group": Path("/etc/group").read_text().splitlines()[-1],
    "environment": Path("/etc/environment").read_text(),
}))
"""


def _config(tmp_path: Path, instance_count: int = 2) -> list[InstanceConfig]:
    configs = instance_configs(tmp_path, {}, instance_count=instance_count)
    keys = ssh_keys.make(tmp_path / "job", configs[0].host_addresses, configs[0].job_id)
    for config in configs:
        ssh_keys.give(keys, config.current_host, config.paths.base)
    return configs


def _prepare(config: InstanceConfig) -> dict[str, Any]:
    uid = job_uid(config.job_id)
    done = subprocess.run(
        ["unshare", "--mount", sys.executable, "-c", PREPARE, str(config.paths.base), str(uid)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _machine() -> dict[str, str]:
    """The machine's own files that an instance shows its own in place of."""
    seen = {}
    for path in [Path("/etc/passwd"), Path("/etc/group"), Path("/etc/environment")]:
        seen[str(path)] = path.read_text()
    for path in sorted(Path("/etc/ssh").glob("*")):
        if path.is_file():
            seen[str(path)] = path.read_text(errors="replace")
    return seen


def test_the_instance_shows_its_own_ssh_user_and_environment(tmp_path: Path) -> None:
    machine = _machine()
    first, second = _config(tmp_path)
    uid = job_uid(first.job_id)

    seen = _prepare(second)

    assert seen["etc_ssh"] == sorted(
        [
            "authorized_keys",
            "ssh_config",
            "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub",
            "ssh_known_hosts",
            "sshd_config",
        ]
    )
    # The daemon runs as the job's user, which must read its host key.
    assert seen["host_key_owner"] == uid
    # The job's key, from the job's hosts alone.
    addresses = ",".join([*second.host_addresses.values(), "127.0.0.1", "::1"])
    user_public = (second.paths.base / ssh.KEYS_DIR / "id_ed25519.pub").read_text().strip()
    assert seen["authorized_keys"] == f'from="{addresses}" {user_public}\n'
    # Every host by name and address, and this one under loopback's names too.
    lines = seen["known_hosts"].splitlines()
    assert [line.split()[0] for line in lines] == [
        *(f"{host},{address}" for host, address in sorted(second.host_addresses.items())),
        "localhost,127.0.0.1,::1",
    ]
    own = (second.paths.base / ssh.KEYS_DIR / "ssh_host_ed25519_key.pub").read_text().split()
    assert lines[1].split()[1:] == lines[2].split()[1:] == own[:2]
    assert lines[0].split()[1:] != own[:2]
    home = second.paths.base / job_user.HOME
    assert seen["passwd"] == f"job:x:{uid}:{uid}:job:{home}:/bin/bash"
    assert seen["group"] == f"job:x:{uid}:"
    assert seen["environment"] == "PATH=/image/bin:/usr/bin:/bin\n"
    # The job's user's ~/.ssh: its key where ssh and paramiko look, the known hosts, and
    # the instance's /etc/environment as what a login starts with.
    user_ssh = home / ".ssh"
    for name, mode in (("id_ed25519", 0o600), ("id_ed25519.pub", 0o644), ("known_hosts", 0o644)):
        found = os.lstat(user_ssh / name)
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (uid, mode), name
    assert (user_ssh / "id_ed25519").read_bytes() == (
        second.paths.base / ssh.KEYS_DIR / "id_ed25519"
    ).read_bytes()
    assert os.readlink(user_ssh / "environment") == "/etc/environment"
    assert (os.stat(user_ssh).st_uid, stat.S_IMODE(os.stat(user_ssh).st_mode)) == (uid, 0o700)
    # The machine's own files, and the other instance's, are as they were.
    assert _machine() == machine
    assert not (first.paths.base / job_ssh.ETC_SSH).exists()


def test_what_the_job_left_in_its_home_is_replaced_never_followed(tmp_path: Path) -> None:
    [config] = _config(tmp_path, instance_count=1)
    home = config.paths.base / job_user.HOME
    outside = tmp_path / "outside"
    outside.mkdir()
    home.mkdir(parents=True)
    # Left by the job's own processes while its requirements were installed.
    (home / ".ssh").symlink_to(outside)

    _prepare(config)

    assert not (home / ".ssh").is_symlink()
    assert sorted(path.name for path in (home / ".ssh").iterdir()) == [
        "environment",
        "id_ed25519",
        "id_ed25519.pub",
        "known_hosts",
    ]
    assert list(outside.iterdir()) == []
    # A link in place of a file is replaced as well.
    (home / ".ssh" / "id_ed25519").unlink()
    (home / ".ssh" / "id_ed25519").symlink_to(outside / "key")
    _prepare(config)
    assert not (home / ".ssh" / "id_ed25519").is_symlink()
    assert not (outside / "key").exists()


def test_this_machines_sshd_takes_the_config_as_the_jobs_user(tmp_path: Path) -> None:
    [config] = _config(tmp_path, instance_count=1)
    uid = job_uid(config.job_id)
    # Where the job's user may read (pytest's directories are root's alone).
    made = Path(tempfile.mkdtemp(prefix="runyard-sshd-"))
    made.chmod(0o755)
    (made / "sshd_config").write_text(job_ssh.sshd_config())
    key = made / ssh.HOST_KEY
    shutil.copyfile(config.paths.base / ssh.KEYS_DIR / ssh.HOST_KEY, key)
    os.chown(key, uid, uid)
    key.chmod(0o600)
    checked = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            ssh.SSHD,
            "-t",
            "-f",
            str(made / "sshd_config"),
            "-o",
            f"HostKey={key}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    shutil.rmtree(made)
    assert checked.returncode == 0, checked.stderr


def test_an_instance_the_backend_gave_no_keys_is_left_as_it_is(tmp_path: Path) -> None:
    [config] = instance_configs(tmp_path, {})
    job_ssh.prepare(dataclasses.replace(config, ssh=True), job_uid(config.job_id))
    job_ssh.prepare(config, job_uid(config.job_id))
    assert not (config.paths.base / job_ssh.ETC_SSH).exists()
