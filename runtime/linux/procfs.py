"""Finding and signalling processes through Linux's /proc.

A pid alone is not an identity (pids are reused), so a process is remembered as (pid,
start time in clock ticks). Every process of a Runyard job carries ``RUNYARD_JOB_ID`` and
``RUNYARD_HOST`` in its environment, which finds the ones that left their process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from contract import variables

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start_ticks: int


def read_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from the state field on, or None if the process is gone."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may hold spaces and parentheses; fields resume after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def identify(pid: int) -> ProcessId | None:
    stat = read_stat(pid)
    return None if stat is None else ProcessId(pid, int(stat[19]))


def is_alive(process: ProcessId) -> bool:
    """True while that very process exists and has not exited (zombies count as exited)."""
    stat = read_stat(process.pid)
    return stat is not None and int(stat[19]) == process.start_ticks and stat[0] not in "ZX"


def marked_processes(job_id: str, host: str | None = None, name: str | None = None) -> list[int]:
    """Live pids whose environment says they belong to ``job_id`` (and ``host``), and whose
    command name is ``name`` if given."""
    wanted = {f"{variables.JOB_ID}={job_id}".encode()}
    if host is not None:
        wanted.add(f"{variables.HOST}={host}".encode())
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if name is not None and (entry / "comm").read_text().strip() != name:
                continue
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        pid = int(entry.name)
        if wanted <= environ and (stat := read_stat(pid)) is not None and stat[0] not in "ZX":
            found.append(pid)
    return found


def children(pid: int) -> list[int]:
    """Live pids whose parent is ``pid``."""
    found = []
    for entry in _PROC.iterdir():
        stat = read_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None and int(stat[1]) == pid and stat[0] not in "ZX":
            found.append(int(entry.name))
    return found


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is ``pgid``."""
    members = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None and stat[0] not in "ZX" and int(stat[2]) == pgid:
                members.append(int(entry.name))
    return members


def signal_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def signal_process(process: ProcessId, sig: signal.Signals) -> None:
    if is_alive(process):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
