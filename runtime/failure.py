"""Why a script failed, in at most 1024 characters, for the job's failure_reason."""

from __future__ import annotations

import re
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


_RULE = re.compile(r"^[-=]{10,}$")
# mpirun --tag-output prefixes each rank's line: "[1,3]<stderr>: ...".
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")


def reason(exit_code: int, stderr_tail: Sequence[str], failure_file: Path) -> str:
    stderr_tail = [_MPI_TAG.sub("", line) for line in stderr_tail]
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
    killed_by = _signal_name(exit_code - 128) if exit_code > 128 else None
    if exception is None and killed_by is not None:
        summary = f"killed by {killed_by}: {summary}"
    return f"AlgorithmError: {summary}, exit code: {exit_code}"[:MAX_REASON]


def _signal_name(number: int) -> str | None:
    """The signal's name, or None if no signal has that number (a plain exit code)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _exception_summary(lines: Sequence[str]) -> str | None:
    """The exception line(s) that end the last Python traceback in ``lines``."""
    starts = [
        i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")
    ]
    if not starts:
        return None
    exception: list[str] = []
    for line in (line.rstrip() for line in lines[starts[-1] + 1 :]):
        if line.startswith((" ", "\t")) and not exception:
            continue  # a frame of the traceback
        if not line or _RULE.match(line):
            break  # what follows is someone else's (mpirun's summary, say)
        exception.append(line)
    return " ".join(exception)[:MAX_REASON] or None
