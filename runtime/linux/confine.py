"""The job's processes, confined: run as a user of the job's own, in a mount namespace
where the server's home is an empty directory and /tmp is the instance's own.

An instance's runtime stays root (it mounts FastFile channels, binds /etc/hosts, enters
network namespaces) and starts each of the job's processes (the launcher, mpirun, the
daemons mpirun asks the launch agent for) through this module:

    python -I -m runtime.linux.confine CONFINEMENT_JSON ENV_FILE -- ARGV...

which, still root, takes a mount namespace of its own, covers each hidden path with an
empty read-only tmpfs and /tmp with the instance's scratch directory, binds back what the
job needs from below them (its Python, Runyard's packages, the image store, the job's
layer: each at the same path, read-only), then drops to the job's user (no supplementary
groups, no capabilities, no new privileges), narrows its system calls (seccomp, where
the machine has libseccomp) and execs ARGV. Children inherit all of it, so nothing the
script starts can climb back.

Why a process and not ``preexec_fn``: the runtime is multithreaded, and what runs between
fork and exec there must not take locks; an exec'd interpreter has none to take. The
covers are locked to the job once its user has no CAP_SYS_ADMIN: it cannot unmount them.
Starting one costs about 50 ms of CPU (``bench/confine_start.py``), once per process the
runtime starts, not per rank a launcher forks.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NoReturn

from contract import json_records, untrusted
from runtime.linux.mounts import (
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    mount,
)

# <sched.h>, <linux/prctl.h> (mount(2)'s flags: runtime.linux.mounts)
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS = 38

# The job's users: one per job, from a range far above the machine's accounts and
# container engines' subordinate ids (65536 per user from 100000, by default).
JOB_UID_BASE = 1_500_000_000
JOB_UID_COUNT = 500_000_000
# What a process of the job learns of its user name (getpass, pip, torch's caches): it
# has no entry in the machine's /etc/passwd.
JOB_USER_NAME = "job"


def job_uid(job_id: str) -> int:
    """The job's own user (and group) id: the same on every instance of the job on this
    machine, another for each other job."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return JOB_UID_BASE + int.from_bytes(digest[:8], "big") % JOB_UID_COUNT


@dataclass(frozen=True)
class Confinement:
    """What a job's process may see and be."""

    uid: int
    # Covered by an empty, read-only directory: the server's home, say.
    hidden: tuple[str, ...] = ()
    # Covered by a directory of the instance's own that the job may write: /tmp, say,
    # by the instance's scratch directory (root's, sticky, as /tmp is).
    private: dict[str, str] = field(default_factory=dict)
    # Bound back, read-only and at the same path, where a cover above hid them.
    read_only: tuple[str, ...] = ()
    # Bound back writable so (the job's layer, while its requirements are installed by the
    # job's user).
    writable: tuple[str, ...] = ()
    # Where the environments of the processes being started wait for them: a directory of
    # root's that the job's user may not list nor write (the runtime's own).
    handover_dir: str = ""

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], python: str = sys.executable
    ) -> tuple[list[str], dict[str, str]]:
        """The command and environment that start ``argv`` confined, with ``env`` once it
        is the job's user. The confining interpreter itself (root until it drops) runs with
        nothing of ``env``: the job's LD_PRELOAD, LD_LIBRARY_PATH or PYTHONPATH would load
        the job's code into it; ``env`` waits in a file of root's that it reads and removes.
        ``-I``: no user site and no PYTHON* variable either."""
        fd, path = tempfile.mkstemp(prefix="env-", suffix=".json", dir=self.handover_dir or None)
        with os.fdopen(fd, "w") as handover:  # mkstemp: 0600, root's
            json.dump(dict(env), handover)
        confinement = json.dumps(json_records.to_data(self))
        command = [python, "-I", "-m", __name__, confinement, path, "--", *argv]
        return command, {"PATH": CONFINER_PATH}

    @classmethod
    def from_json(cls, text: str) -> Confinement:
        return json_records.read(cls, json.loads(text), known_keys_only=True)


# System calls a job's process is refused (EPERM) where seccomp can be used: new
# namespaces of its own (a user namespace would make it root there, and widen what of the
# kernel it reaches), mounts, and kernel facilities no training needs whose bugs have been
# ways out of containers. Most of them need privileges the job's user lacks anyway; the
# filter keeps the kernel's code for them out of its reach too. clone3 takes its flags in
# memory a filter cannot read, so it is refused as "not implemented", and C libraries then
# fall back to clone, whose flags it can.
REFUSED_CALLS = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "open_by_handle_at",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "syslog",
)

# The confining interpreter's whole environment: where it finds nothing but the system's.
CONFINER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# How a process that could not be confined ends: the exit status and line it leaves.
REFUSED_STATUS = 126
REFUSED = "runyard: could not confine the job's process"


def refusal(exit_code: int, stderr_tail: Sequence[str]) -> str | None:
    """The failure reason where a process of the job's ended because it could not be
    confined (Runyard's failure, not the script's), else None."""
    if exit_code != REFUSED_STATUS or not stderr_tail:
        return None
    line = stderr_tail[-1]
    if not line.startswith(REFUSED):
        return None
    return f"InternalServerError: {line.removeprefix('runyard: ')}"


class ConfineError(Exception):
    """The process could not be confined; it is not started at all."""


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.unshare.restype = ctypes.c_int
    libc.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    libc.prctl.restype = ctypes.c_int
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), what)


def enter(confinement: Confinement) -> None:
    """This process, confined (see the module): its own mount namespace with the covers
    and binds, then the job's user. Irreversible."""
    _check(_libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Nothing mounted here reaches the instance's namespace, nor the other way round.
    mount("none", Path("/"), "", MS_REC | MS_PRIVATE, "")
    writable = {Path(p) for p in confinement.writable}
    kept = [Path(p) for p in confinement.read_only] + sorted(writable)
    hidden = {Path(p) for p in confinement.hidden} | _closed_above(kept)
    covers = sorted(
        [(p, None) for p in hidden] + [(Path(p), Path(s)) for p, s in confinement.private.items()],
        key=lambda item: len(item[0].parts),
    )
    # Bound back below a cover: each opened now, before its cover hides it.
    below = [
        (path, cover, os.open(path, os.O_PATH))
        for path in sorted(kept, key=lambda path: len(path.parts))
        if path.exists() and (cover := _cover_of(path, covers)) is not None
    ]
    sources = {cover: os.open(source, os.O_PATH) for cover, source in covers if source}
    covered = []
    for cover, source in covers:
        if not cover.is_dir():
            continue  # nothing there to hide
        if source is None:
            mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
            covered.append(cover)
        else:
            mount(f"/proc/self/fd/{sources[cover]}", cover, "", MS_BIND, "")
    for path, cover, fd in below:
        _bind_back(path, cover, fd, writable=path in writable)
    for fd in [*sources.values(), *(fd for *_, fd in below)]:
        os.close(fd)
    for cover in covered:
        # Read-only once the mount points below are made.
        mount("", cover, "", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755")
    _become(confinement.uid)
    _narrow_system_calls()


def _narrow_system_calls() -> bool:
    """Refuse REFUSED_CALLS (and clone's new user namespaces) from here on, for this
    process and all it starts, through libseccomp (``pyseccomp``); False where this machine
    has no libseccomp: the job then runs without the filter, confined as before."""
    try:
        import pyseccomp as seccomp  # loads libseccomp.so.2 through ctypes
    except (ImportError, OSError):
        return False
    refused = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in REFUSED_CALLS:
        refused.add_rule(seccomp.ERRNO(errno.EPERM), name)
    refused.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    new_user = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    refused.add_rule(seccomp.ERRNO(errno.EPERM), "clone", new_user)
    refused.load()
    return True


def _closed_above(paths: Iterable[Path]) -> set[Path]:
    """The outermost directory above each of ``paths`` that other users may not pass
    through (root's 0700 home, where pyenv keeps its interpreters): the job's user
    reaches what is below it only once it is covered and the path bound back."""
    closed = set()
    for path in paths:
        for above in reversed(path.parents):
            try:
                mode = os.stat(above).st_mode
            except OSError:
                break
            if not mode & stat.S_IXOTH:
                closed.add(above)
                break
    return closed


def _cover_of(path: Path, covers: Sequence[tuple[Path, Path | None]]) -> Path | None:
    """The outermost cover that hides ``path``, if one does."""
    for cover, _ in covers:
        if path == cover or cover in path.parents:
            return cover
    return None


def _bind_back(path: Path, cover: Path, fd: int, *, writable: bool = False) -> None:
    """``path`` (open as ``fd``) shown again at its place, under the cover above it. Its
    mount point is made by this process, as root; a cover bound from a directory the job
    writes (its /tmp) is root's and sticky, so what root made there the job can neither
    move nor replace; a mount point found to be anything but root's own directory (the
    job's, made before) refuses the start."""
    is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
    made = path if is_dir else path.parent
    # Made from the cover down without following a link the job may have left there.
    with untrusted.directory(cover, PurePosixPath(made.relative_to(cover)), create=True):
        pass
    for directory in [made, *made.parents]:
        if directory != cover and cover not in directory.parents:
            break  # above the cover: the machine's own
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
            raise ConfineError(f"{directory} is not root's own directory")
    if not is_dir:
        path.touch(mode=0o644, exist_ok=True)
    mount(f"/proc/self/fd/{fd}", path, "", MS_BIND | MS_REC, "")
    read_only = 0 if writable else MS_RDONLY
    mount("", path, "", MS_REMOUNT | MS_BIND | read_only | MS_NOSUID | MS_NODEV, "")


def _become(uid: int) -> None:
    """The job's user and group, and nothing else: no supplementary groups, no
    capabilities (a change from root to another user clears them all), and no way to
    gain any through a set-user-ID program."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _check(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _handed_over(path: str) -> dict[str, str]:
    """The environment ``Confinement.start`` left at ``path``, which is then removed."""
    try:
        with open(path, encoding="utf-8") as handover:
            env = json.load(handover)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return {str(name): str(value) for name, value in env.items()}


def main(argv: Sequence[str]) -> NoReturn:
    if len(argv) < 4 or argv[2] != "--":
        print(
            "usage: python -I -m runtime.linux.confine CONFINEMENT ENV_FILE -- ARGV...",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        env = _handed_over(argv[1])
        enter(Confinement.from_json(argv[0]))
    except (OSError, ValueError, KeyError, AttributeError, ConfineError) as exc:
        print(f"{REFUSED}: {exc}", file=sys.stderr)
        sys.exit(REFUSED_STATUS)
    command = list(argv[3:])
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"runyard: could not start {command[0]}: {exc}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
