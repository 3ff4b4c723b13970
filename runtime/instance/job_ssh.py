"""SSH between the job's own hosts, as SageMaker's training containers have it: a script
starts ``/usr/sbin/sshd -D`` (SageMaker's MPI drivers do), and ``ssh algo-2 ...``,
paramiko, and Open MPI's ``mpirun --host algo-1,algo-2`` reach every host of the job on
port 22 without a password or a question.

The runtime, still root, readies the instance for it from the keys its backend made for
the job alone (``contract.ssh``), before the job's first process starts:

- the instance's own ``/etc/ssh`` (shown over the machine's in its mount namespace
  alone): an ``sshd_config`` for an sshd of the job's user's (no PAM, no pid file, logins
  by the job's key alone, from the job's hosts' addresses alone: ``authorized_keys``'
  ``from=``), an ``ssh_config``, the instance's own host key, and every host of the job
  in ``ssh_known_hosts`` under its name and address;
- the job's user's ``~/.ssh``: the job's key pair (where ssh and paramiko look for one),
  the known hosts (where paramiko's ``load_system_host_keys`` reads them), and
  ``environment``, the instance's ``/etc/environment`` (``runtime.instance.own_etc``): a
  login starts with what it holds (``PermitUserEnvironment``), the image's PATH to begin
  with (so that Open MPI's daemon and the image's Python are found), then whatever the
  script appends, as pam_env gives a login in SageMaker's containers;
- port 22 open to the job's user in the instance's network namespace (its own
  ``ip_unprivileged_port_start``): the daemon runs without privileges.

The daemon is a process of the job's, started by its script, in the instance's process
namespace: it ends with the instance, as everything of the job does. The network keeps
other jobs' instances from reaching it at all.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path, PurePosixPath

from contract import ssh, untrusted
from contract.instance_config import InstanceConfig
from runtime.instance.job_user import HOME
from runtime.instance.own_etc import ENVIRONMENT, ETC, MACHINE_ETC
from runtime.linux.confine import JOB_USER_NAME
from runtime.linux.namespaces import bind, unprivileged_ports_from

MACHINE_SSH = MACHINE_ETC / "ssh"
# The instance's own /etc/ssh, below its base directory (root's).
ETC_SSH = f"{ETC}/ssh"
USER_SSH = f"{HOME}/.ssh"
AUTHORIZED_KEYS = "authorized_keys"
KNOWN_HOSTS = "ssh_known_hosts"
# Debian's openssh-sftp-server, offered where the machine has it.
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
LOOPBACK = ("127.0.0.1", "::1")
# ~/.ssh, opened to change it: never through a link.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def prepare(config: InstanceConfig, uid: int) -> str | None:
    """The instance readied for SSH between the job's hosts (see the module), for the
    job's user ``uid``; where the backend gave it no keys, or the machine has no sshd,
    nothing is done (a script that starts one is told it is missing). What the instance
    lacks of it all the same, to be said in its log, or None."""
    keys = config.paths.base / ssh.KEYS_DIR
    if not config.ssh or not keys.is_dir() or not MACHINE_SSH.is_dir():
        return None
    etc_ssh = config.paths.base / ETC_SSH
    etc_ssh.mkdir(mode=0o755, parents=True, exist_ok=True)
    host_key = (keys / ssh.HOST_KEY).read_bytes()
    host_public = (keys / ssh.public(ssh.HOST_KEY)).read_text()
    user_key = (keys / ssh.USER_KEY).read_bytes()
    user_public = (keys / ssh.public(ssh.USER_KEY)).read_text().strip()
    known = known_hosts((keys / ssh.KNOWN_HOSTS).read_text(), host_public)
    _write(etc_ssh / ssh.HOST_KEY, host_key, 0o600, uid)
    _write(etc_ssh / ssh.public(ssh.HOST_KEY), host_public.encode(), 0o644)
    _write(etc_ssh / "sshd_config", sshd_config().encode(), 0o644)
    _write(etc_ssh / "ssh_config", SSH_CONFIG.encode(), 0o644)
    _write(etc_ssh / KNOWN_HOSTS, known.encode(), 0o644)
    addresses = [*config.host_addresses.values(), *LOOPBACK]
    _write(etc_ssh / AUTHORIZED_KEYS, authorized_key(user_public, addresses).encode(), 0o644)
    bind(etc_ssh, MACHINE_SSH)
    _user_ssh(config.paths.base, uid, user_key, user_public, known)
    if config.network_namespace is None:
        return None
    try:
        unprivileged_ports_from(ssh.PORT, config.network_namespace)
    except OSError as exc:  # a kernel without the sysctl per network namespace (before 4.11)
        return f"the job's user cannot listen on port {ssh.PORT} here: {exc}"
    return None


def known_hosts(job_hosts: str, own_public: str) -> str:
    """The job's hosts' keys (``algo-N,ADDRESS KEY`` a line, from the backend), and this
    instance's own under loopback's names."""
    kind, body, *_ = own_public.split()
    return f"{job_hosts}localhost,{','.join(LOOPBACK)} {kind} {body}\n"


def authorized_key(public: str, addresses: list[str]) -> str:
    """The job's key, admitted from ``addresses`` alone."""
    return f'from="{",".join(addresses)}" {public}\n'


def sshd_config() -> str:
    subsystem = f"Subsystem sftp {SFTP_SERVER}\n" if SFTP_SERVER.exists() else ""
    return SSHD_CONFIG + subsystem


SSHD_CONFIG = f"""\
# This instance's sshd, made for this job alone: the job's user starts it (SageMaker's
# MPI drivers run `/usr/sbin/sshd -D`), on port 22 of the instance's own network.
Port {ssh.PORT}
HostKey /etc/ssh/{ssh.HOST_KEY}
# Without privileges: no PAM, no pid file, no user but its own.
UsePAM no
PidFile none
AllowUsers {JOB_USER_NAME}
PermitRootLogin no
# The job's key alone, from the job's own hosts (the key's from= in the file).
AuthorizedKeysFile /etc/ssh/{AUTHORIZED_KEYS}
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
# A login starts with ~/.ssh/environment, the instance's /etc/environment.
PermitUserEnvironment yes
AcceptEnv LANG LC_*
PrintMotd no
PrintLastLog no
X11Forwarding no
LogLevel ERROR
"""

SSH_CONFIG = f"""\
# This instance's ssh, made for this job alone: every host of the job is known by its key,
# under its name and its address, so that no login asks anything.
Host *
    GlobalKnownHostsFile /etc/ssh/{KNOWN_HOSTS}
    BatchMode yes
    HashKnownHosts no
    SendEnv LANG LC_*
    LogLevel ERROR
"""


def _write(path: Path, data: bytes, mode: int, owner: int | None = None) -> None:
    """A file of the instance's own /etc/ssh (root's directory: nothing of the job's is on
    the way), never readable beyond ``mode``, not even while it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as file:
        if owner is not None:
            os.fchown(file.fileno(), owner, owner)
        os.fchmod(file.fileno(), mode)
        file.write(data)


def _user_ssh(base: Path, uid: int, key: bytes, public: str, known: str) -> None:
    """The job's user's ~/.ssh, in a home the job's user owns (and may have written into
    before, while its requirements were installed): nothing found there is followed."""
    with untrusted.directory(base, HOME) as home:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.stat(".ssh", dir_fd=home, follow_symlinks=False).st_mode):
                os.unlink(".ssh", dir_fd=home)
        with contextlib.suppress(FileExistsError):
            os.mkdir(".ssh", 0o700, dir_fd=home)
        directory = os.open(".ssh", _DIRECTORY, dir_fd=home)
    try:
        os.fchown(directory, uid, uid)
        os.fchmod(directory, 0o700)
        _link(directory, ENVIRONMENT, str(MACHINE_ETC / ENVIRONMENT))
    finally:
        os.close(directory)
    files = {
        ssh.USER_KEY: (key, 0o600),
        ssh.public(ssh.USER_KEY): (f"{public}\n".encode(), 0o644),
        "known_hosts": (known.encode(), 0o644),
    }
    for name, (data, mode) in files.items():
        untrusted.write_file(base, PurePosixPath(USER_SSH, name), data, mode, owner=uid)


def _link(directory: int, name: str, target: str) -> None:
    """``name`` in ``directory`` a symbolic link to ``target``, in place of whatever was
    there (renamed over it, never written through)."""
    temporary = f".runyard-{secrets.token_hex(8)}"
    os.symlink(target, temporary, dir_fd=directory)
    try:
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
