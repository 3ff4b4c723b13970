"""The per-instance process group: output pumped, one failure ends the rest, stop forwarded."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from runtime.launch.workers import WorkerGroup, WorkerSpec


def _spec(tmp_path: Path, code: str) -> WorkerSpec:
    return WorkerSpec([sys.executable, "-c", code], {"PYTHONUNBUFFERED": "1"}, tmp_path)


def test_lines_are_pumped_per_stream(tmp_path: Path) -> None:
    lines: list[tuple[str, str]] = []
    code = "import sys; print('out'); print('err', file=sys.stderr)"
    result = WorkerGroup(
        [_spec(tmp_path, code)], lambda s, m: lines.append((s, m)), threading.Event()
    ).run()
    assert result.exit_code == 0
    assert sorted(lines) == [("stderr", "err"), ("stdout", "out")]


def test_one_failure_ends_the_others(tmp_path: Path) -> None:
    sleeper = _spec(tmp_path, "import os, time; print(os.getpid(), flush=True); time.sleep(60)")
    failer = _spec(
        tmp_path, "import sys, time; time.sleep(0.5); print('boom', file=sys.stderr); sys.exit(3)"
    )
    lines: list[str] = []
    result = WorkerGroup([sleeper, failer], lambda s, m: lines.append(m), threading.Event()).run()
    assert result.exit_code == 3
    assert result.stderr_tail == ["boom"]
    assert not _alive(int(lines[0]))


def test_stop_reaches_each_script_exactly_once(tmp_path: Path) -> None:
    # A handler that takes its time (as saving a checkpoint does) and counts its calls.
    code = (
        "import signal, sys, time\n"
        "calls = []\n"
        "def save(*_):\n"
        "    calls.append(1)\n"
        "    time.sleep(1.0)\n"
        "    print(f'saved after {len(calls)} SIGTERM(s)', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    lines: list[str] = []
    stop = threading.Event()
    group = WorkerGroup(
        [_spec(tmp_path, code), _spec(tmp_path, code)], lambda s, m: lines.append(m), stop
    )
    # Asked to stop three times, as a runtime may be (a stop, then a teardown).
    for delay in (1.0, 1.2, 1.4):
        threading.Timer(delay, stop.set).start()
    result = group.run()
    assert result.stopped
    assert sorted(lines) == [
        "ready",
        "ready",
        "saved after 1 SIGTERM(s)",
        "saved after 1 SIGTERM(s)",
    ]


def test_a_child_left_holding_the_pipes_does_not_hold_up_the_instance(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(child.pid, flush=True)\n"
    )
    lines: list[str] = []
    result = WorkerGroup(
        [_spec(tmp_path, code)], lambda s, m: lines.append(m), threading.Event()
    ).run()
    holder = int(lines[0])
    still_running = _alive(holder)  # run() returned without waiting for it
    os.kill(holder, signal.SIGKILL)
    assert result.exit_code == 0
    assert still_running


def test_an_auxiliary_process_does_not_hold_the_instance_open(tmp_path: Path) -> None:
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    server = WorkerSpec(
        [sys.executable, "-c", code], {"PYTHONUNBUFFERED": "1"}, tmp_path, auxiliary=True
    )
    script = _spec(tmp_path, "import time; time.sleep(0.5); print('trained')")
    lines: list[str] = []
    result = WorkerGroup([server, script], lambda s, m: lines.append(m), threading.Event()).run()
    assert result.exit_code == 0
    assert lines[1:] == ["trained"]
    assert not _alive(int(lines[0]))  # ended once the script was done, not waited for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
