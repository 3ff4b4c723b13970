"""The container engine the local backend runs custom containers with (podman, or Docker
where a daemon answers), and the removal of whatever containers a job left.

``RUNYARD_CONTAINER_ENGINE`` is ``auto`` (podman on the PATH, else a Docker whose daemon
answers) or the engine's command itself, with options (``podman --runtime runc``, say, on
a machine whose cgroups crun refuses).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess

from contract.containers import LABEL_JOB_ID

INSTALL_HINT = (
    "install podman on the worker's machine (Debian, Ubuntu: apt-get install podman), or "
    "run Docker there, or set RUNYARD_CONTAINER_ENGINE to the engine's command"
)


@functools.cache
def find(setting: str) -> tuple[tuple[str, ...], str]:
    """(the engine's command, "") or ((), why there is none), asked once per process."""
    if setting != "auto":
        command = tuple(shlex.split(setting))
        if not command or shutil.which(command[0]) is None:
            return (), f"RUNYARD_CONTAINER_ENGINE names {setting!r}, which is not on the PATH"
        return command, ""
    if shutil.which("podman") is not None:
        return ("podman",), ""
    if shutil.which("docker") is not None and _answers(["docker", "info"]):
        return ("docker",), ""
    return (), f"no container engine on the worker's machine: {INSTALL_HINT}"


def remove_job(engine: tuple[str, ...], job_id: str) -> list[str]:
    """Remove every container of the job, running or not; returns their ids. Teardown's
    last step: an engine killed before its container ended leaves it running."""
    if not engine:
        return []
    listed = _run([*engine, "ps", "--all", "--quiet", "--filter", f"label={LABEL_JOB_ID}={job_id}"])
    ids = listed.split()
    if ids:
        _run([*engine, "kill", *ids])  # at once: their scripts had their grace
        _run([*engine, "rm", "--force", *ids])
    return ids


def _run(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout


def _answers(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
