"""Why a script failed, for the job's failure_reason: the script's own words if it wrote
them, else the exception that ended its last traceback, fitted to MAX_REASON characters
keeping the end (``contract.failures.fit``), and below it as many of the traceback's last
frames, those nearest the error, as fit whole in what is left.

Where several ranks share the stderr (mpirun, torchrun) the traceback is that of the rank
that failed first (``rank_output``), never a launcher's own: mpirun's summary of the
exit and torchrun's ``ChildFailedError`` only say which rank that was.

output/failure is the job's, read and written by its root runtime: never followed if it is
a link, never waited on if it is a FIFO, and never read whole if it is large
(``contract.untrusted``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from contract import untrusted
from contract.failure_causes import OUT_OF_MEMORY_EXIT
from contract.failures import MARKERS, fit, fit_lines, last_within, left_out
from contract.limits import MAX_REASON
from runtime.reporting import rank_output, torchrun_summary
from runtime.reporting.tracebacks import FRAME, HEADING, RULE, Traceback, last_traceback

# How much of output/failure is read: all of it up to this size; past it, its first line
# and this many bytes of its end, which hold far more than a reason keeps of a text
# (``fit``: the first line and the last lines).
FAILURE_READ_BYTES = 64 * MAX_REASON


class NotAFile(Exception):
    """Something other than a regular file is where the script's failure file goes."""


def read_failure_file(path: Path) -> str | None:
    """What the script left at output/failure (``path``): its own explanation, if it wrote
    one; if it left something there that is not a regular file (a link, a FIFO), a note
    saying so, which is no explanation (``reason`` passes over it) but keeps the runtime
    from writing there in its stead. None if nothing is there, or only blank text."""
    try:
        return _written(path)
    except NotAFile as exc:
        return str(exc)


def write_failure_file(path: Path, reason: str) -> None:
    """Leave ``reason`` at output/failure (``path``) as a new regular file, in place of
    whatever is there: a link the script left there is replaced, never written through."""
    root, relative = _below_output(path)
    untrusted.write_file(root, relative, reason.encode())


def reason(exit_code: int, stderr_tail: Sequence[str], failure_file: Path) -> str:
    try:
        written = _written(failure_file)
    except NotAFile:
        written = None  # no words of the script's: what it printed says more
    if written:
        return written
    if exit_code == OUT_OF_MEMORY_EXIT:
        return (
            "OutOfMemory: the script was killed with SIGKILL (exit code 137), "
            "most likely because the instance ran out of memory"
        )
    return _algorithm_error(exit_code, stderr_tail)


def _written(path: Path) -> str | None:
    root, relative = _below_output(path)
    try:
        fd, found = untrusted.open_file(root, relative)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except untrusted.Refused as exc:
        raise NotAFile(f"{exc}: not read") from exc
    try:
        if found.st_size <= FAILURE_READ_BYTES:
            data = untrusted.read(fd, FAILURE_READ_BYTES)
        else:
            data = _first_line_and_end(fd, found.st_size)
    finally:
        os.close(fd)
    return fit(data.decode(errors="replace").strip()) or None


def _first_line_and_end(fd: int, size: int) -> bytes:
    """A failure file too large to read: its first line (as much of it as a reason keeps)
    and its last whole lines within FAILURE_READ_BYTES, all ``fit`` looks at. Lines left
    out in between are not counted (that would take reading them)."""
    first = untrusted.read(fd, 4 * MAX_REASON).partition(b"\n")[0]
    end = untrusted.read(fd, FAILURE_READ_BYTES, size - FAILURE_READ_BYTES)
    _cut, newline, whole_lines = end.partition(b"\n")
    return first + b"\n" + (whole_lines if newline else end)


def _below_output(path: Path) -> tuple[Path, PurePosixPath]:
    """``path`` as a file below the directory above its own (the base directory, above
    output/): output/ itself is the job's, and may be anything."""
    root = path.parent.parent
    return root, PurePosixPath(path.parent.name, path.name)


def _algorithm_error(exit_code: int, stderr_tail: Sequence[str]) -> str:
    traceback, said = _explanation(stderr_tail)
    prefix, suffix = "AlgorithmError: ", f", exit code: {exit_code}"
    killed_by = _signal_name(exit_code - 128) if exit_code > 128 else None
    if traceback is None and killed_by is not None:
        prefix += f"killed by {killed_by}: "
    # The exit code stays whatever is cut: it is what retry rules and people look for.
    room = MAX_REASON - len(prefix) - len(suffix)
    if traceback is not None:
        summary = prefix + fit(traceback.exception, room) + suffix
        return summary + _innermost_frames(traceback.frames, MAX_REASON - len(summary))
    summary = fit_lines(said, room, " | ") or "the script printed nothing to stderr"
    return prefix + summary + suffix


def _explanation(stderr_tail: Sequence[str]) -> tuple[Traceback | None, list[str]]:
    """The traceback that explains the failure, or else the lines that say most of it:
    that of the rank its launcher names as the first to fail, else that of the first rank
    to print one (either passed over where it says only that a peer was lost), else the
    last untagged one."""
    lines = list(stderr_tail)
    summary = torchrun_summary.find(lines)
    root = summary.root_cause if summary is not None else None
    trusted = root if summary is not None and summary.root_cause_alone else None
    if summary is not None:
        del lines[summary.start : summary.end]  # torchrun's, not the script's
    ranked = rank_output.untag(lines)
    named = [trusted.rank if trusted else None, rank_output.mpirun_first_rank(ranked)]
    texts = [line.text for line in ranked]
    traceback = (
        rank_output.traceback_of(ranked, named)
        or last_traceback(trusted.traceback if trusted else [])  # from its error file
        or rank_output.first_cause(ranked)
        or last_traceback(root.traceback if root else [])
        or last_traceback(texts)  # a single process's, or ranks that tag nothing
    )
    if traceback is None and root is not None:
        return None, [root.describe()]
    said = [text.strip() for text in texts if text.strip() and not RULE.match(text.strip())]
    return traceback, said[-3:]


def _innermost_frames(lines: Sequence[str], room: int) -> str:
    """The traceback's heading and as many of its last frames as fit whole in ``room``,
    on lines of their own below the exception; nothing if not even the last frame fits."""
    heading = [lines[0]] if lines and lines[0].startswith(HEADING) else []
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
        if FRAME.match(line) or not frames:
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
