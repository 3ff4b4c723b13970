"""The instance handed to the job's user: what the job's processes may write becomes
theirs, and how each of them is started confined (``runtime.linux.confine``).

The runtime stays root and keeps to itself what it holds for the service (its token in
its environment, the agent's listening socket); the job's user owns what is in /opt/ml
(code, model, output, checkpoints, what its File channels hold) but the runtime's own
directory and input/ itself, its own Python layer and a home there, as a container's user
owns what it writes; /opt/ml and input/ stay root's, so the job cannot move the runtime's
directory, or input/data, aside. The image and the job's layer stay readable to it, not
writable.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from contract import file_confinement
from contract.instance_config import InstanceConfig
from runtime.linux.confine import JOB_USER_NAME, Confinement, job_uid

# Below the base directory: the runtime's own directory (root's; the job may pass
# through, not list it), and in it the job's scratch (root's, sticky, everyone's: the
# instance's /tmp), the home of the job's user, and the files the launch agents that run
# as the job's user leave for the runtime.
RUNTIME_DIR = ".runyard"
SCRATCH = f"{RUNTIME_DIR}/tmp"  # noqa: S108 (below the base directory)
HOME = f"{RUNTIME_DIR}/home"
AGENT_NOTES = (f"{RUNTIME_DIR}/agent-failures", f"{RUNTIME_DIR}/agent-lost")
AGENT_KEY = f"{RUNTIME_DIR}/agent.key"


def confinement(config: InstanceConfig, read_only: Sequence[Path]) -> Confinement:
    """How each of the job's processes on this instance is started: as the job's user,
    with the server's paths (``config.hidden_paths``) hidden, the instance's scratch
    directory as /tmp, and ``read_only`` (the runtime's environment, the images) and the
    job's layer bound back where a cover hides them."""
    scratch = str(config.paths.base / SCRATCH)
    kept = [str(path) for path in read_only]
    if config.job_layer:
        kept.append(config.job_layer)
    return Confinement(
        uid=job_uid(config.job_id),
        hidden=tuple(config.hidden_paths),
        private={"/tmp": scratch, "/var/tmp": scratch},  # noqa: S108 (made private here)
        read_only=tuple(kept),
        handover_dir=str(config.paths.base / RUNTIME_DIR),
    )


def installer(config: InstanceConfig, read_only: Sequence[Path]) -> Confinement:
    """How the job's requirements (and its code, when it is a package) are installed with
    namespaces: by the job's user, confined as its processes are, the job's layer writable
    to it. Whatever the job's packages run while they build (a setup.py) runs so, never as
    root."""
    how = confinement(config, read_only)
    layer = config.job_layer
    return dataclasses.replace(
        how,
        read_only=tuple(path for path in how.read_only if path != layer),
        writable=(layer,) if layer else (),
    )


# pip's settings that may name directories of the machine to install from.
_PIP_SOURCES = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")


def local_pip_sources(env: Mapping[str, str], config: InstanceConfig) -> list[Path]:
    """The directories of this machine that the job's pip settings name to install from
    (``PIP_FIND_LINKS=/data/wheels``, a ``file://`` index) and that a job may read, being
    inside the roots its file:// URIs are held to (the server's file roots, or its
    project's places, read-only grants among them) and holding nothing hidden from it:
    the job's user, installing, is shown them read-only (its /tmp is its own)."""
    roots = [*config.file_roots, *config.read_only_roots]
    roots += [os.path.realpath(root) for root in roots]  # a root may itself be a link
    found = []
    for name in _PIP_SOURCES:
        for word in env.get(name, "").split():
            path = word.removeprefix("file://")
            if not path.startswith("/"):
                continue  # a URL pip fetches over the network
            resolved = os.path.realpath(path)
            readable = any(file_confinement.inside(resolved, root) for root in roots)
            hides = any(file_confinement.inside(hidden, resolved) for hidden in config.hidden_paths)
            if os.path.isdir(resolved) and readable and not hides:
                found.append(Path(resolved))
    return found


def ready_for_install(config: InstanceConfig, uid: int) -> None:
    """What an install by the job's user needs of the instance: its /tmp and home, and
    the code, which a package's build writes beside (build/, *.egg-info), its own."""
    _runtime_dirs(config, uid)
    own_tree(config.paths.code, uid)


def _runtime_dirs(config: InstanceConfig, uid: int) -> None:
    base = config.paths.base
    runtime_dir = base / RUNTIME_DIR
    runtime_dir.mkdir(parents=True, exist_ok=True)
    runtime_dir.chmod(0o711)
    scratch = base / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    os.chown(scratch, 0, 0)
    scratch.chmod(0o1777)
    (base / HOME).mkdir(mode=0o700, exist_ok=True)
    own_tree(base / HOME, uid)


def hand_over(config: InstanceConfig, uid: int, instance_layer: Path | None = None) -> None:
    """Make the job's user the owner of what its processes write on this instance (and
    of its Python layer, where it has one). Its files are walked without following links
    and without crossing into other mounts (a FastFile channel, a FUSE mount of its own)."""
    base = config.paths.base
    _runtime_dirs(config, uid)
    for name in AGENT_NOTES:
        (base / name).touch(mode=0o600, exist_ok=True)
    paths = config.paths
    # input/ stays root's, sticky and open to all, as /tmp is: SageMaker's drivers write
    # beside their config (the SDK's leave input/sm_training.env), and the job may not move
    # input/data, where the runtime makes each Pipe epoch's FIFO and mounts FastFile
    # channels, aside for a link. What File channels hold is the job's, as the files it
    # reads would be in a container (a file kept 0600 at its source stays readable);
    # FIFOs and mounted channels stay root's.
    os.chown(paths.input, 0, 0)
    paths.input.chmod(0o1777)
    data_device = os.lstat(paths.data).st_dev
    for channel in paths.data.iterdir():
        found = os.lstat(channel)
        if found.st_dev == data_device and not stat.S_ISFIFO(found.st_mode):
            own_tree(channel, uid)
    # The rest of /opt/ml but the runtime's own directory is the job's.
    owned = [
        *(path for path in base.iterdir() if path.name not in (RUNTIME_DIR, paths.input.name)),
        # Never a path of the machine's: the local backend keeps them right below the
        # base directory (contract.layout.local_checkpoint_problem).
        *([paths.checkpoints] if _below(paths.checkpoints, base) else []),
        *([instance_layer] if instance_layer is not None else []),
        base / HOME,
        *(base / name for name in (*AGENT_NOTES, AGENT_KEY)),
    ]
    for path in owned:
        own_tree(path, uid)


def job_environment(env: Mapping[str, str], config: InstanceConfig) -> dict[str, str]:
    """``env`` for a process of the job's user: a home it may write (caches of pip,
    torch, Hugging Face), and a user name, which it has none of in /etc/passwd."""
    home = str(config.paths.base / HOME)
    return {**env, "HOME": home, "USER": JOB_USER_NAME, "LOGNAME": JOB_USER_NAME}


def _below(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def own_tree(root: Path, uid: int) -> None:
    """``root`` and what is below it on its file system owned by ``uid``, links not
    followed (nor their targets changed)."""
    try:
        top = os.lstat(root)
    except FileNotFoundError:
        return
    os.chown(root, uid, uid, follow_symlinks=False)
    if not stat.S_ISDIR(top.st_mode):
        return
    for directory, names in _walk_one_device(root, top.st_dev):
        for name in names:
            os.chown(os.path.join(directory, name), uid, uid, follow_symlinks=False)


def _walk_one_device(root: Path, device: int) -> Iterable[tuple[str, list[str]]]:
    """(directory, entries) below ``root`` on its own file system, links not followed."""
    for directory, dirs, files in os.walk(root, followlinks=False):
        kept = [d for d in dirs if os.lstat(os.path.join(directory, d)).st_dev == device]
        dirs[:] = kept
        yield directory, [*kept, *files]
