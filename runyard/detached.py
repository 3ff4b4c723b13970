"""The embedded server in the background: `runyard server --detach` starts it and returns
once it answers, its output going to ``$RUNYARD_HOME/server.log``; `runyard server status`
says whether one runs and where; `runyard server stop` stops it and waits until it has
ended (its worker, beat and jobs' instances with it), as `docker run -d` / `docker stop`.

A server records its URL and process in ``server.json`` while it serves; that record,
checked against the process it names, is what tells a running server here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from runyard.client import RunyardError, wait_until_up

LOG_NAME = "server.log"
# As long as a first start may take on a loaded machine (the schema made, the images'
# layers looked at), and as long as stopping may (its jobs' instances given their grace).
START_TIMEOUT = 180.0
STOP_TIMEOUT = 90.0
# The lines of the log shown when a server did not start.
_TAIL_LINES = 30


@dataclass(frozen=True)
class Running:
    url: str
    pid: int


def running(home: Path) -> Running | None:
    """The server serving from ``home``, if one is: its record, and its process alive."""
    try:
        record = json.loads((home / "server.json").read_text())
        found = Running(str(record["url"]), int(record["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if _is_runyard(found.pid) else None


def start(home: Path, host: str, port: int, url: str) -> Running:
    """Start `runyard server` in a session of its own (it outlives this command and a
    terminal's hangup), and return once it answers at ``url``, a dot on stderr each
    second until then."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / LOG_NAME
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "runyard", "server", "--host", host, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ticks = [time.monotonic()]

    def dot() -> None:
        if time.monotonic() - ticks[0] >= 1.0:
            ticks[0] = time.monotonic()
            click.echo(".", nl=False, err=True)

    up = wait_until_up(
        url, timeout=START_TIMEOUT, alive=lambda: process.poll() is None, waiting=dot
    )
    if not up:
        if process.poll() is None:
            process.terminate()
            process.wait(30)
        raise RunyardError(f"the server did not start; the end of {log}:\n{_tail(log)}")
    return Running(url, process.pid)


def stop(home: Path) -> Running | None:
    """Stop the server serving from ``home`` (SIGTERM: it stops its jobs' instances and its
    children, then ends) and wait until its process has ended; None if none was running."""
    found = running(home)
    if found is None:
        return None
    try:
        os.kill(found.pid, signal.SIGTERM)
    except ProcessLookupError:
        return found
    deadline = time.monotonic() + STOP_TIMEOUT
    while _is_runyard(found.pid):
        if time.monotonic() > deadline:
            raise RunyardError(
                f"the server (pid {found.pid}) did not stop within {STOP_TIMEOUT:.0f} s; "
                f"see {home / LOG_NAME}"
            )
        time.sleep(0.2)
    return found


def _is_runyard(pid: int) -> bool:
    """Whether ``pid`` is a live `runyard` process (not another that took its number)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and b"runyard" in command


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-_TAIL_LINES:])
    except OSError:
        return "(no log)"
