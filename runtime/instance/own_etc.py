"""The instance's own files in /etc, as a container has them from its image: the job's user
by name (``/etc/passwd``, ``/etc/group``), with its home and a shell, and an
``/etc/environment`` the job's user may write.

Each is made in the runtime's own directory and shown over the machine's in the
instance's mount namespace alone (the job's processes see it through theirs): the
machine's own files are never changed. The machine's entries stay, so that what a
process looks up by name (a file's owner, a group) resolves as before.

Why the job's user needs a name: OpenSSH's ``ssh`` and ``sshd`` find the user by its id and
name in the user database (getpwuid, getpwnam), not by ``$USER``; a user without an entry
can neither start ssh ("No user exists for uid ...") nor log in. And why
``/etc/environment``: SageMaker's MPI drivers append the script's environment to it, which
the logins of the job's other hosts then start with (``runtime.instance.ssh``), as
pam_env gives it to a login in SageMaker's containers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from contract.instance_config import InstanceConfig
from runtime.instance.job_user import HOME, RUNTIME_DIR
from runtime.linux.confine import JOB_USER_NAME
from runtime.linux.namespaces import bind

# Below the base directory: the instance's own /etc files (root's; its directory too).
ETC = f"{RUNTIME_DIR}/etc"
MACHINE_ETC = Path("/etc")
ENVIRONMENT = "environment"
# The job's user's login shell: the first of these the machine has.
SHELLS = ("/bin/bash", "/bin/sh")


def show(config: InstanceConfig, uid: int, environment: Mapping[str, str]) -> None:
    """The job's user (``uid``) in the instance's /etc/passwd and /etc/group, and an
    /etc/environment of the instance's own, the job's user's to write, that starts with
    ``environment`` (what a login needs: the image's PATH). A file the machine lacks is
    not shown: there is nothing to show it over."""
    etc = config.paths.base / ETC
    etc.mkdir(mode=0o755, parents=True, exist_ok=True)
    home = config.paths.base / HOME
    shell = next((path for path in SHELLS if os.access(path, os.X_OK)), SHELLS[-1])
    entries = {
        "passwd": f"{JOB_USER_NAME}:x:{uid}:{uid}:{JOB_USER_NAME}:{home}:{shell}\n",
        "group": f"{JOB_USER_NAME}:x:{uid}:\n",
    }
    for name, entry in entries.items():
        machine = MACHINE_ETC / name
        if not machine.is_file():
            continue
        own = etc / name
        own.write_text(_without_job(machine.read_text(errors="replace"), uid) + entry)
        own.chmod(0o644)
        bind(own, machine)
    own = etc / ENVIRONMENT
    own.write_text("".join(f"{name}={value}\n" for name, value in environment.items()))
    os.chown(own, uid, uid)
    own.chmod(0o644)
    if (MACHINE_ETC / ENVIRONMENT).is_file():
        bind(own, MACHINE_ETC / ENVIRONMENT)


def _without_job(text: str, uid: int) -> str:
    """The lines of a passwd or group file but those of the job's user's name or id (the
    machine's own, by chance, or this instance's, shown earlier), ending with a newline."""
    kept = []
    for line in text.splitlines():
        fields = line.split(":")
        if fields[0] == JOB_USER_NAME or (len(fields) > 2 and fields[2] == str(uid)):
            continue
        kept.append(f"{line}\n")
    return "".join(kept)
