"""Why a script failed, for the job's failure_reason: the script's own words if it wrote
them, else the exception that ended its last traceback, fitted to MAX_REASON characters
keeping the end (``contract.failures.fit``), and below it as many of the traceback's last
frames, those nearest the error, as fit whole in what is left."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import Path

from contract.failures import MARKERS, fit, fit_lines, last_within, left_out
from contract.limits import MAX_REASON

OUT_OF_MEMORY_EXIT = 137

_TRACEBACK = "Traceback (most recent call last)"
# A frame's location, '  File "/opt/ml/code/train.py", line 3, in main'; a syntax error's
# location has the same shape without the ", in ...".
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)')
# Their message says what is wrong but not where: the location line above it does.
_SYNTAX_ERRORS = ("SyntaxError:", "IndentationError:", "TabError:")
_RULE = re.compile(r"^[-=]{10,}$")
# mpirun --tag-output prefixes each rank's line: "[1,3]<stderr>: ...".
_MPI_TAG = re.compile(r"^\[(?P<rank>\d+,\d+)\]<std(?:out|err)>:\s?")


def read_failure_file(path: Path) -> str | None:
    """The script's own explanation, if it wrote one to output/failure."""
    try:
        text = path.read_text(errors="replace").strip()
    except (FileNotFoundError, IsADirectoryError):
        return None
    return fit(text) or None


def reason(exit_code: int, stderr_tail: Sequence[str], failure_file: Path) -> str:
    written = read_failure_file(failure_file)
    if written:
        return written
    if exit_code == OUT_OF_MEMORY_EXIT:
        return (
            "OutOfMemory: the script was killed with SIGKILL (exit code 137), "
            "most likely because the instance ran out of memory"
        )
    return _algorithm_error(exit_code, _one_rank(stderr_tail))


def _algorithm_error(exit_code: int, stderr_tail: Sequence[str]) -> str:
    traceback = _last_traceback(stderr_tail)
    prefix, suffix = "AlgorithmError: ", f", exit code: {exit_code}"
    killed_by = _signal_name(exit_code - 128) if exit_code > 128 else None
    if traceback is None and killed_by is not None:
        prefix += f"killed by {killed_by}: "
    # The exit code stays whatever is cut: it is what retry rules and people look for.
    room = MAX_REASON - len(prefix) - len(suffix)
    if traceback is not None:
        frames, exception = traceback
        summary = prefix + fit(exception, room) + suffix
        return summary + _innermost_frames(frames, MAX_REASON - len(summary))
    last_lines = [line.strip() for line in stderr_tail[-3:] if line.strip()]
    summary = fit_lines(last_lines, room, " | ") or "the script printed nothing to stderr"
    return prefix + summary + suffix


def _one_rank(lines: Sequence[str]) -> list[str]:
    """``lines`` without mpirun's rank tags; where ranks are tagged, only the lines of the
    rank whose traceback came last, since ranks that fail together interleave theirs."""
    tags = [_MPI_TAG.match(line) for line in lines]
    rank = next(
        (
            tag["rank"]
            for line, tag in zip(reversed(lines), reversed(tags), strict=True)
            if tag is not None and _is_traceback(line[tag.end() :])
        ),
        None,
    )
    return [
        line[tag.end() :] if tag is not None else line
        for line, tag in zip(lines, tags, strict=True)
        if rank is None or (tag is not None and tag["rank"] == rank)
    ]


def _is_traceback(line: str) -> bool:
    return line.startswith(_TRACEBACK) or _FRAME.match(line) is not None


def _innermost_frames(lines: Sequence[str], room: int) -> str:
    """The traceback's heading and as many of its last frames as fit whole in ``room``,
    on lines of their own below the exception; nothing if not even the last frame fits."""
    heading = [lines[0]] if lines and lines[0].startswith(_TRACEBACK) else []
    frames = _frames(lines[len(heading) :])
    if not frames:
        return ""
    whole = "\n" + "\n".join([*heading, *frames])
    if len(whole) <= room:
        return whole
    fixed = sum(len(line) + 1 for line in heading) + len(left_out(len(frames), "frame")) + 2
    kept = last_within(frames, room - fixed, "\n")
    if not kept:
        return ""
    return "\n" + "\n".join([*heading, left_out(len(frames) - len(kept), "frame"), *kept])


def _frames(lines: Sequence[str]) -> list[str]:
    """Each frame's lines (its location, its code) joined, without 3.11's markers."""
    frames: list[list[str]] = []
    for line in lines:
        if MARKERS.match(line):
            continue
        if _FRAME.match(line) or not frames:
            frames.append([line])
        else:
            frames[-1].append(line)
    return ["\n".join(frame) for frame in frames]


def _signal_name(number: int) -> str | None:
    """The signal's name, or None if no signal has that number (a plain exit code)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _last_traceback(lines: Sequence[str]) -> tuple[list[str], str] | None:
    """The last Python traceback in ``lines``: its heading and frames, and the exception
    line(s) that end it; a syntax error's with the file and line it names."""
    begin = _traceback_start(lines)
    if begin is None:
        return None
    frames: list[str] = []
    exception: list[str] = []
    location: re.Match[str] | None = None
    for line in (line.rstrip() for line in lines[begin:]):
        if not exception and (line.startswith((" ", "\t")) or line.startswith(_TRACEBACK)):
            location = _FRAME.match(line) or location
            frames.append(line)  # the traceback's heading or one of its frames
            continue
        if not line or _RULE.match(line):
            break  # what follows is someone else's (mpirun's summary, say)
        exception.append(line)
    if not exception:
        return None
    if location is not None and exception[0].startswith(_SYNTAX_ERRORS):
        exception[0] += f" ({location['file']}, line {location['line']})"
    return frames, "\n".join(exception)


def _traceback_start(lines: Sequence[str]) -> int | None:
    """Where the last traceback in ``lines`` starts. A deep one's heading may have left
    the tail already, and a script's syntax error has none: then its first frame."""
    headings = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    if headings:
        return headings[-1]
    return next((i for i, line in enumerate(lines) if _FRAME.match(line)), None)
