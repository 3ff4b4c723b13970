"""Linux process bookkeeping for the local backend.

An instance is the process group of its runtime; the generic /proc work (identities that
survive pid reuse, the job's environment marker) lives in ``runtime.linux.procfs``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

from runtime.linux.procfs import (
    ProcessId,
    children,
    group_members,
    identify,
    is_alive,
    marked_processes,
    signal_pids,
    signal_process,
)

__all__ = [
    "ProcessId",
    "child_exit_code",
    "children",
    "forget_child",
    "group_members",
    "identify",
    "is_alive",
    "marked_processes",
    "remember_child",
    "signal_group",
    "signal_pids",
    "signal_process",
]


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


# How long teardown waits to reap an instance it has seen go. /proc stops showing a process's
# environment (its job marker) as soon as its exit frees its memory, a moment before it
# becomes a zombie that can be reaped.
REAP_WAIT_SECONDS = 2.0


def forget_child(pid: int, timeout: float = REAP_WAIT_SECONDS) -> None:
    """Reap a child whose instance has gone. One that is still running after ``timeout``
    stays remembered, so a later poll reaps it: dropped unreaped, it would linger as a
    zombie and its Popen would warn that it is still running."""
    with _children_lock:
        process = _children.get(pid)
    if process is None:
        return
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return
    with _children_lock:
        _children.pop(pid, None)
