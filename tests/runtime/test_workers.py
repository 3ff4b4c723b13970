"""The per-instance process group: output pumped, one failure ends the rest, stop forwarded."""

from __future__ import annotations

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
    result = WorkerGroup([_spec(tmp_path, code)], lambda s, m: lines.append((s, m))).run()
    assert result.exit_code == 0
    assert sorted(lines) == [("stderr", "err"), ("stdout", "out")]


def test_one_failure_ends_the_others(tmp_path: Path) -> None:
    sleeper = _spec(tmp_path, "import time; time.sleep(60)")
    failer = _spec(tmp_path, "import sys; print('boom', file=sys.stderr); sys.exit(3)")
    started = time.monotonic()
    result = WorkerGroup([sleeper, failer], lambda s, m: None).run()
    assert result.exit_code == 3
    assert result.stderr_tail == ["boom"]
    assert time.monotonic() - started < 15


def test_stop_passes_sigterm_on(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('saving'), sys.exit(0)))\n"
        "print('ready')\n"
        "time.sleep(60)\n"
    )
    lines: list[str] = []
    group = WorkerGroup([_spec(tmp_path, code)], lambda s, m: lines.append(m))
    threading.Timer(1.0, group.request_stop).start()
    result = group.run()
    assert result.stopped
    assert lines == ["ready", "saving"]
