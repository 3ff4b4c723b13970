"""When the instances of a job on the local backend exit, seen from outside: the backend's
pid files name each instance's leader, and /proc says when it is gone (for the tests and
the benchmark that time a job's end)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from runtime.linux.procfs import ProcessId, is_alive

# How often a leader is looked at: its exit is known to this much.
WATCH_SECONDS = 0.002


def instance_leaders(job_dir: Path, count: int, timeout: float = 120.0) -> list[ProcessId]:
    """Each instance's leader, once the backend has written its pid file under
    ``job_dir`` (``<jobs dir>/<job id>``)."""
    deadline = time.monotonic() + timeout
    files = [job_dir / f"algo-{n}.pid.json" for n in range(1, count + 1)]
    while True:
        try:
            return [ProcessId(**json.loads(path.read_text())) for path in files]
        except (FileNotFoundError, json.JSONDecodeError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no instances under {job_dir} after {timeout:g} s") from None
            time.sleep(0.01)


def last_exit(leaders: list[ProcessId], timeout: float = 300.0) -> datetime:
    """When the last of ``leaders`` exited (as a zombie, or reaped). Watched one after the
    other: a leader found gone already is no later than the one waited for before it."""
    deadline = time.monotonic() + timeout
    for leader in leaders:
        while is_alive(leader):
            if time.monotonic() > deadline:
                raise TimeoutError(f"instance {leader.pid} still runs after {timeout:g} s")
            time.sleep(WATCH_SECONDS)
    return datetime.now(UTC)
