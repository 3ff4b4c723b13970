"""Failure reasons begin with a code, as SageMaker's do (``AlgorithmError: ...``): text
for people, which the reconciler never parses (a failure's cause travels beside it as a
type, ``contract.failure_causes``). A reason is at most MAX_REASON characters (SageMaker's
FailureReason), and what explains a failure comes last: the exception ends a traceback,
and an exception that carries another's traceback (a DataLoader worker's, a
subprocess's) ends with the cause. A text too long therefore keeps its first line and its
end, never only its start."""

from __future__ import annotations

import re
from collections.abc import Sequence

from contract.limits import MAX_REASON

# The code of a reason that says an instance failed (its machine or its network), not the
# script.
INSTANCE_LOST = "InstanceLost"
# Python 3.11's markers under a frame's code ("    ~~~^^^", a syntax error's "    ^"): no
# use without the line above in a fixed-width font, so the first lines to go when a text is
# too long.
MARKERS = re.compile(r"^\s*[~^]+\s*$")
# The first line of a long text may take this share of the room at most: the end matters more.
_FIRST_LINE_SHARE = 4


def instance_lost(message: str) -> str:
    return f"{INSTANCE_LOST}: {message}"


def fit(text: str, limit: int = MAX_REASON) -> str:
    """``text`` in at most ``limit`` characters: whole when it fits; else its first line
    (an exception's own, or a traceback's heading), how many lines were left out, and as
    many of its last lines as fit."""
    if len(text) <= limit:
        return text
    return fit_lines(text.splitlines(), limit, "\n")


def fit_lines(lines: Sequence[str], limit: int, separator: str) -> str:
    whole = separator.join(lines)
    if len(whole) <= limit:
        return whole
    lines = [line for line in lines if not MARKERS.match(line)] or [whole]
    if len(lines) == 1:
        return _cut(lines[0], limit)
    first, rest = _cut(lines[0], limit // _FIRST_LINE_SHARE), lines[1:]
    room = limit - len(first) - len(left_out(len(rest))) - 2 * len(separator)
    kept = _last_lines_within(rest, room, separator)
    if len(kept) == len(rest):
        return separator.join([first, *kept])
    return separator.join([first, left_out(len(rest) - len(kept)), *kept])


def left_out(count: int, what: str = "line") -> str:
    return f"[{count} {what}{'' if count == 1 else 's'} left out]"


def last_within(items: Sequence[str], room: int, separator: str) -> list[str]:
    """The last of ``items`` that fit whole in ``room`` joined by ``separator``, in their
    order; none if not even the last one does."""
    kept: list[str] = []
    used = 0
    for item in reversed(items):
        used += len(item) + (len(separator) if kept else 0)
        if used > room:
            break
        kept.append(item)
    return kept[::-1]


def _last_lines_within(lines: Sequence[str], room: int, separator: str) -> list[str]:
    """The last of ``lines`` that fit in ``room``; if not even the last one does, its
    start, which names the error."""
    return last_within(lines, room, separator) or [_cut(lines[-1], room)]


def _cut(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return line[: max(limit - 1, 0)] + "…"
