"""Why a script failed, in at most 1024 characters, for the job's failure_reason."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

MAX_REASON = 1024
OUT_OF_MEMORY_EXIT = 137


def read_failure_file(path: Path) -> str | None:
    """The script's own explanation, if it wrote one to output/failure."""
    try:
        text = path.read_text(errors="replace").strip()
    except (FileNotFoundError, IsADirectoryError):
        return None
    return text[:MAX_REASON] or None


def reason(exit_code: int, stderr_tail: Sequence[str], failure_file: Path) -> str:
    written = read_failure_file(failure_file)
    if written:
        return written
    if exit_code == OUT_OF_MEMORY_EXIT:
        return (
            "OutOfMemory: the script was killed with SIGKILL (exit code 137), "
            "most likely because the instance ran out of memory"
        )
    exception = _exception_summary(stderr_tail)
    last_lines = " | ".join(line.strip() for line in stderr_tail[-3:] if line.strip())
    summary = exception or last_lines or "the script printed nothing to stderr"
    if exception is None and exit_code > 128:
        summary = f"killed by {_signal_name(exit_code - 128)}: {summary}"
    return f"AlgorithmError: {summary}, exit code: {exit_code}"[:MAX_REASON]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exception_summary(lines: Sequence[str]) -> str | None:
    """The exception line(s) that end the last Python traceback in ``lines``."""
    starts = [
        i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")
    ]
    if not starts:
        return None
    after = [line.rstrip() for line in lines[starts[-1] + 1 :]]
    # Frames are indented; the exception (possibly several lines) is not.
    tail = [line for line in after if line and not line.startswith((" ", "\t"))]
    return " ".join(tail)[:MAX_REASON] or None
