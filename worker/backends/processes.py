"""Linux process bookkeeping for the local backend.

An instance is the process group of its runtime. A pid alone is not an identity (pids are
reused), so a launched instance is remembered as (pid, start time in clock ticks). Every
process of a job also carries ``RUNYARD_JOB_ID`` in its environment, which finds the
ones that left the group (``setsid``) or outlived their leader.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
JOB_MARKER = "RUNYARD_JOB_ID"


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start_ticks: int


def start_ticks(pid: int) -> int | None:
    stat = _read_stat(pid)
    return None if stat is None else int(stat[19])


def identify(pid: int) -> ProcessId | None:
    ticks = start_ticks(pid)
    return None if ticks is None else ProcessId(pid, ticks)


def is_alive(process: ProcessId) -> bool:
    """True while that very process exists and has not exited (zombies count as exited)."""
    stat = _read_stat(process.pid)
    return stat is not None and int(stat[19]) == process.start_ticks and stat[0] not in "ZX"


def _read_stat(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may hold spaces and parentheses; fields resume after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def marked_processes(job_id: str, host: str | None = None) -> list[int]:
    """Live pids whose environment says they belong to ``job_id`` (and ``host``)."""
    wanted = {f"{JOB_MARKER}={job_id}".encode()}
    if host is not None:
        wanted.add(f"RUNYARD_HOST={host}".encode())
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        pid = int(entry.name)
        if wanted <= environ and (stat := _read_stat(pid)) is not None and stat[0] not in "ZX":
            found.append(pid)
    return found


def signal_group(leader: ProcessId, sig: signal.Signals, job_id: str) -> None:
    """Signal every process in the instance's group, also after its leader has gone."""
    if is_alive(leader):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, sig)
        return
    # The leader's pid may since name someone else's group; the group is the job's only
    # if a member still carries the job's marker. Its other members (a child that cleared
    # its environment, say) are then found through the group alone.
    members = group_members(leader.pid)
    if set(members) & set(marked_processes(job_id)):
        signal_pids(members, sig)


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is ``pgid``."""
    members = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None and stat[0] not in "ZX" and int(stat[2]) == pgid:
                members.append(int(entry.name))
    return members


def signal_process(process: ProcessId, sig: signal.Signals) -> None:
    if is_alive(process):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)


def signal_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# Children this process started. Polling them reaps them, so an exited instance does not
# linger as a zombie (which /proc would still list) while this worker lives.
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


def remember_child(process: subprocess.Popen[bytes]) -> None:
    with _children_lock:
        _children[process.pid] = process


def child_exit_code(pid: int) -> int | None:
    """The exit code of a child of this process, if it is ours and has exited."""
    with _children_lock:
        process = _children.get(pid)
    if process is None:
        return None
    code = process.poll()
    if code is not None and code < 0:
        code = 128 - code  # killed by a signal: report as a shell would (SIGKILL -> 137)
    return code


def forget_child(pid: int) -> None:
    with _children_lock:
        process = _children.pop(pid, None)
    if process is not None:
        process.poll()
