"""A job's SSH keys on the local backend, made with the machine's own ssh-keygen: once per
job, one host key per instance, each instance given its share alone; a launch that finds
them made adopts them, one that finds a part of them makes them again."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from contract import ssh
from provisioning.local import ssh_keys

pytestmark = pytest.mark.skipif(
    ssh_keys.unavailable() is not None, reason=f"{ssh_keys.unavailable()}"
)

ADDRESSES = {"algo-1": "10.213.4.2", "algo-2": "10.213.4.3"}


def _public(path: Path) -> list[str]:
    return path.read_text().split()[:2]


def test_a_jobs_keys_are_its_own_and_each_host_is_known_by_name_and_address(
    tmp_path: Path,
) -> None:
    keys = ssh_keys.make(tmp_path, ADDRESSES, "job-id")
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    hosts = [_public(keys / host / ssh.public(ssh.HOST_KEY)) for host in ADDRESSES]
    assert hosts[0] != hosts[1]
    assert all(kind == "ssh-ed25519" for kind, _ in hosts)
    assert (keys / ssh.KNOWN_HOSTS).read_text() == "".join(
        f"{host},{address} {kind} {body}\n"
        for (host, address), (kind, body) in zip(ADDRESSES.items(), hosts, strict=True)
    )
    user = _public(keys / ssh.public(ssh.USER_KEY))
    assert user not in hosts
    # Nothing of the machine's own host keys.
    machine = {tuple(_public(path)) for path in Path("/etc/ssh").glob("ssh_host_*.pub")}
    assert not machine & {tuple(user), *map(tuple, hosts)}


def test_a_relaunch_adopts_them_and_a_part_of_them_is_made_again(tmp_path: Path) -> None:
    keys = ssh_keys.make(tmp_path, ADDRESSES, "job-id")
    user = (keys / ssh.USER_KEY).read_bytes()
    assert ssh_keys.make(tmp_path, ADDRESSES, "job-id") == keys
    assert (keys / ssh.USER_KEY).read_bytes() == user
    # An attempt that died before the known hosts were written left a part of them.
    (keys / ssh.KNOWN_HOSTS).unlink()
    ssh_keys.make(tmp_path, ADDRESSES, "job-id")
    assert (keys / ssh.USER_KEY).read_bytes() != user
    assert (keys / ssh.KNOWN_HOSTS).exists()


def test_each_instance_is_given_its_own_host_key_and_the_jobs_user_key(tmp_path: Path) -> None:
    keys = ssh_keys.make(tmp_path / "job", ADDRESSES, "job-id")
    base = tmp_path / "algo-2"
    ssh_keys.give(keys, "algo-2", base)
    share = base / ssh.KEYS_DIR
    assert sorted(path.name for path in share.iterdir()) == sorted(
        [
            ssh.USER_KEY,
            ssh.public(ssh.USER_KEY),
            ssh.HOST_KEY,
            ssh.public(ssh.HOST_KEY),
            ssh.KNOWN_HOSTS,
        ]
    )
    assert (share / ssh.HOST_KEY).read_bytes() == (keys / "algo-2" / ssh.HOST_KEY).read_bytes()
    assert (share / ssh.USER_KEY).read_bytes() == (keys / ssh.USER_KEY).read_bytes()
    assert stat.S_IMODE(os.stat(share).st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(path).st_mode) for path in share.iterdir()} == {0o600}


def test_without_openssh_there_is_no_ssh_and_the_reason_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ssh_keys, "KEYGEN_PATH", "/nonexistent")
    assert ssh_keys.unavailable() == "ssh-keygen (Debian's openssh-client) is not installed"
