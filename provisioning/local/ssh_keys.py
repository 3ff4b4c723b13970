"""A job's SSH keys on the local backend (``contract.ssh``): made for the job alone, with
OpenSSH's own ``ssh-keygen``, when its instances are hosts of their own.

They are made once per job, in its directory (``ssh-keys/``, root's, 0700): the job's
user's key pair and a host key per instance, then the known hosts, each host's key under
its name and address, written last: a launch that finds them made by an earlier attempt
adopts them, and one that finds a part of them made makes them again. Each instance is
given its share before it starts: the user's pair, its own host key, the known hosts.
None of them is ever part of a plan, and nothing of the machine's own /etc/ssh is used.

The instance's sshd is the machine's ``/usr/sbin/sshd`` (Debian's openssh-server),
started by the job's script as the job's user: the machine's own ssh service is never
started nor needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from contract import ssh

KEYS = "ssh-keys"
KEYGEN = "ssh-keygen"
# ssh-keygen's whole environment: where it finds nothing but the system's.
KEYGEN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class SshKeyError(Exception):
    """The job's keys could not be made."""


def unavailable() -> str | None:
    """Why this machine's instances can have no SSH between them, or None where they can."""
    if not os.access(ssh.SSHD, os.X_OK):
        return f"{ssh.SSHD} (Debian's openssh-server) is not installed"
    if shutil.which(KEYGEN, path=KEYGEN_PATH) is None:
        return f"{KEYGEN} (Debian's openssh-client) is not installed"
    return None


def make(job_dir: Path, addresses: Mapping[str, str], job_id: str) -> Path:
    """The job's keys, for the hosts of ``addresses`` (by name), made unless an earlier
    launch made them all: the directory that holds them."""
    keys = job_dir / KEYS
    if (keys / ssh.KNOWN_HOSTS).exists():
        return keys
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    _keygen(keys / ssh.USER_KEY, f"job-{job_id}")
    known = []
    for host, address in sorted(addresses.items()):
        (keys / host).mkdir(mode=0o700, exist_ok=True)
        host_key = keys / host / ssh.HOST_KEY
        _keygen(host_key, host)
        kind, body, *_ = (keys / host / ssh.public(ssh.HOST_KEY)).read_text().split()
        known.append(f"{host},{address} {kind} {body}\n")
    partial = keys / f"{ssh.KNOWN_HOSTS}.part"
    partial.write_text("".join(known))
    partial.rename(keys / ssh.KNOWN_HOSTS)
    return keys


def give(keys: Path, host: str, base_dir: Path) -> None:
    """``host``'s share of the job's keys, in its base directory (``contract.ssh.KEYS_DIR``,
    root's: the runtime gives the job's user what it needs of them)."""
    target = base_dir / ssh.KEYS_DIR
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    shares: Sequence[Path] = (
        keys / ssh.USER_KEY,
        keys / ssh.public(ssh.USER_KEY),
        keys / host / ssh.HOST_KEY,
        keys / host / ssh.public(ssh.HOST_KEY),
        keys / ssh.KNOWN_HOSTS,
    )
    for source in shares:
        shutil.copyfile(source, target / source.name)
        (target / source.name).chmod(0o600)


def _keygen(path: Path, comment: str) -> None:
    """A new Ed25519 key at ``path`` (and ``path.pub``), without a passphrase; what an
    interrupted attempt left there is replaced."""
    for left in (path, path.with_name(ssh.public(path.name))):
        left.unlink(missing_ok=True)
    command = [KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    try:
        subprocess.run(
            command,
            env={"PATH": KEYGEN_PATH},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=30,
        )
    except FileNotFoundError as exc:
        raise SshKeyError(f"{KEYGEN} is not installed") from exc
    except subprocess.CalledProcessError as exc:
        said = exc.stderr.decode(errors="replace").strip()
        raise SshKeyError(f"{KEYGEN} failed: {said[-300:]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SshKeyError(f"{KEYGEN} did not end in {exc.timeout:.0f} s") from exc
