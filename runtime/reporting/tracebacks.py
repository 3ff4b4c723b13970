"""Python tracebacks in a process's stderr: where one begins, its frames, and the exception
line(s) that end it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

HEADING = "Traceback (most recent call last)"
# A frame's location, '  File "/opt/ml/code/train.py", line 3, in main'; a syntax error's
# location has the same shape without the ", in ...".
FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)')
# A banner's rule (mpirun's "-----", torchrun's "====="): whatever follows is not the
# exception's.
RULE = re.compile(r"^[-=]{10,}$")
# A line of torch's logs (glog's format, "E0501 10:00:00.123456 4242 api.py:9] failed",
# bracketed from C++): a launcher's own, which may follow a worker's exception at once.
LOG_LINE = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ ")
# Their message says what is wrong but not where: the location line above it does.
_SYNTAX_ERRORS = ("SyntaxError:", "IndentationError:", "TabError:")


@dataclass(frozen=True)
class Traceback:
    # Its heading (when still in the text) and its frames, each location and code line.
    frames: list[str]
    # The exception's line(s), a syntax error's with the file and line it names.
    exception: str


def begins_traceback(line: str) -> bool:
    """Whether ``line`` is a traceback's heading or a frame's location: what a process
    prints first when an exception ends it."""
    return line.startswith(HEADING) or FRAME.match(line) is not None


def last_traceback(lines: Sequence[str]) -> Traceback | None:
    """The last Python traceback in ``lines``, which under chained exceptions ("During
    handling of the above exception...") is the one that ended the process."""
    begin = _start(lines)
    if begin is None:
        return None
    frames: list[str] = []
    exception: list[str] = []
    location: re.Match[str] | None = None
    for line in (line.rstrip() for line in lines[begin:]):
        if not exception and (line.startswith((" ", "\t")) or line.startswith(HEADING)):
            location = FRAME.match(line) or location
            frames.append(line)  # the traceback's heading or one of its frames
            continue
        if not line or RULE.match(line) or LOG_LINE.match(line):
            break  # what follows is someone else's (mpirun's summary, torchrun's log)
        exception.append(line)
    if not exception:
        return None
    if location is not None and exception[0].startswith(_SYNTAX_ERRORS):
        exception[0] += f" ({location['file']}, line {location['line']})"
    return Traceback(frames, "\n".join(exception))


def _start(lines: Sequence[str]) -> int | None:
    """Where the last traceback in ``lines`` starts. A deep one's heading may have left
    the tail already, and a script's syntax error has none: then its first frame."""
    headings = [i for i, line in enumerate(lines) if line.startswith(HEADING)]
    if headings:
        return headings[-1]
    return next((i for i, line in enumerate(lines) if FRAME.match(line)), None)
