"""The per-instance process group: output pumped, one failure ends the rest, stop forwarded."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
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
    pid_file = tmp_path / "sleeper.pid"
    sleeper = _spec(tmp_path, _write_pid_then_sleep(pid_file))
    failer = _spec(
        tmp_path,
        f"{_wait_for_file(pid_file)}\nimport sys; print('boom', file=sys.stderr); sys.exit(3)",
    )
    result = WorkerGroup([sleeper, failer], lambda s, m: None, threading.Event()).run()
    assert result.exit_code == 3
    assert result.stderr_tail == ["boom"]
    assert not _alive(int(pid_file.read_text()))


def test_a_failure_is_told_by_the_last_lines_its_script_printed(tmp_path: Path) -> None:
    # A slow sink (a loaded machine, a busy log shipper) leaves lines in the pipe when the
    # script exits: its traceback is still what the failure is made from.
    def slow_sink(_stream: str, _line: str) -> None:
        time.sleep(0.004)

    code = "import sys\nfor n in range(100): print(f'line {n}', file=sys.stderr)\nsys.exit(1)"
    result = WorkerGroup([_spec(tmp_path, code)], slow_sink, threading.Event()).run()
    assert result.exit_code == 1
    assert result.stderr_tail[-1] == "line 99"


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

    def sink(_stream: str, message: str) -> None:
        lines.append(message)
        if lines.count("ready") == 2:  # both handlers are in place: ask them to stop
            stop.set()

    # The wait loop sees the stop on every turn for the second the handlers take; it must
    # pass it on only once.
    result = WorkerGroup([_spec(tmp_path, code), _spec(tmp_path, code)], sink, stop).run()
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
    pid_file = tmp_path / "server.pid"
    server = WorkerSpec(
        [sys.executable, "-c", _write_pid_then_sleep(pid_file)], {}, tmp_path, auxiliary=True
    )
    script = _spec(tmp_path, f"{_wait_for_file(pid_file)}\nprint('trained')")
    lines: list[str] = []
    result = WorkerGroup([server, script], lambda s, m: lines.append(m), threading.Event()).run()
    assert result.exit_code == 0
    assert lines == ["trained"]
    assert not _alive(int(pid_file.read_text()))  # ended once the script was done


def test_a_process_afterwards_starts_once_the_script_is_done_and_the_server_still_serves(
    tmp_path: Path,
) -> None:
    pid_file, done = tmp_path / "server.pid", tmp_path / "script.done"
    server = WorkerSpec(
        [sys.executable, "-c", _write_pid_then_sleep(pid_file)], {}, tmp_path, auxiliary=True
    )
    script = _spec(
        tmp_path, f"{_wait_for_file(pid_file)}\nimport time; time.sleep(0.5)\nprint('trained')"
    )
    # It sees the script done (its mark written after it) and the server still there.
    mark = f"open({str(done)!r}, 'w').close()"
    script = WorkerSpec([*script.argv[:-1], f"{script.argv[-1]}\n{mark}"], {}, tmp_path)
    check = (
        f"import os\nprint('after', os.path.exists({str(done)!r}), "
        f"os.path.exists('/proc/' + open({str(pid_file)!r}).read()))"
    )
    later = WorkerSpec([sys.executable, "-c", check], {}, tmp_path, afterwards=True)
    lines: list[str] = []
    result = WorkerGroup(
        [server, later, script], lambda s, m: lines.append(m), threading.Event()
    ).run()
    assert result.exit_code == 0
    assert lines == ["trained", "after True True"]
    assert not _alive(int(pid_file.read_text()))  # ended once that was done too


def test_a_failure_afterwards_fails_the_instance(tmp_path: Path) -> None:
    later = WorkerSpec([sys.executable, "-c", "raise SystemExit(4)"], {}, tmp_path, afterwards=True)
    result = WorkerGroup(
        [_spec(tmp_path, "print('trained')"), later], lambda s, m: None, threading.Event()
    ).run()
    assert result.exit_code == 4


# Ordering by files, not by sleeps: on a loaded machine a process may take seconds to start.
def _write_pid_then_sleep(pid_file: Path) -> str:
    return (
        "import os, time\n"
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        f"os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        "time.sleep(60)"
    )


def _wait_for_file(path: Path) -> str:
    return f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.01)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
