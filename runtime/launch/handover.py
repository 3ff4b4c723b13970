"""What passes between the runtimes of an MPI job and the launch agents that mpirun calls,
through files in the instances' own directories.

An instance is ready for mpirun's daemon once its runtime has its code and data and waits
for the daemon (``mark_ready``); until then a launch agent waits for it, as ssh waits for a
machine that is still booting. An agent that cannot start the daemon says why in the
calling instance's directory (``record_failure``), so that the first instance's runtime
reports the failure as Runyard's, not as the script's.

Agents run as the job's user, and the files they leave are the job's: the runtime (root)
reads them without following a link or waiting on a FIFO, and only their start
(``contract.untrusted``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

from contract import untrusted, variables

READY = Path(".runyard") / "mpi-ready"
FAILURES = Path(".runyard") / "agent-failures"
# Daemons whose connection broke while they ran: their instance is gone, whatever mpirun's
# exit status says (prterun can exit 0 after "lost communication with a remote daemon").
LOST = Path(".runyard") / "agent-lost"
# How long an agent waits for its instance (and the remote agent's client for the server).
DEFAULT_PATIENCE = 600.0
# How much of the agents' files is read: the runtime reports their first line.
MAX_NOTES_BYTES = 64 * 1024


class PatienceError(ValueError):
    """The patience variable is not a number of seconds."""


def mark_ready(base: Path) -> None:
    # A new file in place of whatever is there: never a touch through a link.
    untrusted.write_file(base, READY.as_posix(), b"")


def wait_until_ready(base: Path, patience: float, poll: float = 0.1) -> bool:
    """Whether the instance at ``base`` became ready within ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while not (base / READY).exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def record_failure(
    message: str, environ: Mapping[str, str] = os.environ, *, lost: bool = False
) -> None:
    """Leave ``message`` for the runtime of the instance the agent runs for (its base
    directory is in the environment mpirun handed on): best effort, the agent's own exit
    status still tells mpirun. ``lost``: the daemon was running and its instance went."""
    base = environ.get(variables.BASE_DIR)
    if not base:
        return
    line = message.replace("\n", " ") + "\n"
    with contextlib.suppress(OSError):
        untrusted.append(Path(base), (LOST if lost else FAILURES).as_posix(), line.encode())


def failures(base: Path) -> list[str]:
    return _lines(base, FAILURES)


def lost(base: Path) -> list[str]:
    return _lines(base, LOST)


def _lines(base: Path, relative: Path) -> list[str]:
    """The lines the agents left, as far as MAX_NOTES_BYTES; none where anything but a
    regular file is there (the job's doing: no agent leaves one)."""
    try:
        data = untrusted.read_start(base, relative.as_posix(), MAX_NOTES_BYTES)
    except (FileNotFoundError, NotADirectoryError, untrusted.Refused):
        return []
    return data.decode(errors="replace").splitlines()


def patience(environ: Mapping[str, str] = os.environ) -> float:
    raw = environ.get(variables.AGENT_CONNECT_TIMEOUT, "")
    try:
        return float(raw) if raw else DEFAULT_PATIENCE
    except ValueError:
        name = variables.AGENT_CONNECT_TIMEOUT
        raise PatienceError(f"{name} must be a number of seconds, not {raw!r}") from None
