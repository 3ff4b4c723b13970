"""The supervisor behind `runyard server`, with real child processes: how long it waits
before restarting one that died."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from runyard.server import Supervisor

FIRST_DELAY = 0.05
HEALTHY_AFTER = 3.0

# Counts its starts in a file. Starts 1 to 3 and 5 die at once; start 4 runs past
# HEALTHY_AFTER before it dies; start 6 stays up until the supervisor stops it.
_CHILD = """
n=$(( $(cat starts 2>/dev/null || echo 0) + 1 ))
echo "$n" > starts.tmp && mv starts.tmp starts
case "$n" in
  4) sleep 4 ;;
  6) exec sleep 600 ;;
esac
exit 3
"""


def _wait_for_starts(directory: Path, count: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        starts = directory / "starts"
        if starts.exists() and int(starts.read_text() or 0) >= count:
            return
        time.sleep(0.05)
    pytest.fail(f"the child was not started {count} times")


def test_back_off_starts_again_after_a_healthy_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runyard.server")
    supervisor = Supervisor(
        {"worker": ["sh", "-c", f"cd {tmp_path} && {_CHILD}"]},
        dict(os.environ),
        first_delay=FIRST_DELAY,
        healthy_after=HEALTHY_AFTER,
    )
    supervisor.start()
    try:
        _wait_for_starts(tmp_path, 6)
    finally:
        supervisor.stop()

    delays = [
        record.args[2]
        for record in caplog.records
        if record.name == "runyard.server" and isinstance(record.args, tuple)
    ]
    # Doubling while it dies on start; from the first delay again after the long run.
    assert delays == [FIRST_DELAY, 2 * FIRST_DELAY, 4 * FIRST_DELAY, FIRST_DELAY, 2 * FIRST_DELAY]
