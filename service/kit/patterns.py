"""Regular expressions that users write (``metric_definitions``, ``retry_rules``), run
with a time limit: a pattern that backtracks without end on some line must not hold an
API request or a worker. The ``regex`` engine takes Python's ``re`` syntax (its VERSION0
is ``re``-compatible) and, unlike ``re``, can stop a search that runs too long.
"""

from __future__ import annotations

import time

import regex

# Far above what a sane pattern takes on a 16 KiB line; a search past it finds nothing.
SEARCH_TIMEOUT_SECONDS = 0.05

Pattern = regex.Pattern
PatternError = regex.error


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """Compile a user's pattern; raises ``PatternError`` naming what is wrong."""
    return regex.compile(pattern, flags=regex.VERSION0)


# regex measures the limit in the whole process's CPU time (clock()): while a search of
# microseconds waits for a CPU on a loaded machine, the process's other threads can spend
# the limit for it (one metric point in 172,800 was lost so). A search whose own thread
# did not spend half the limit is tried again, at most this many times in all.
_ATTEMPTS = 5


def search(pattern: regex.Pattern[str], text: str) -> regex.Match[str] | None:
    """The first match in ``text``, or None, also when the search ran out of time."""
    for _ in range(_ATTEMPTS):
        began = time.thread_time()
        try:
            return pattern.search(text, timeout=SEARCH_TIMEOUT_SECONDS)
        except TimeoutError:
            if time.thread_time() - began >= SEARCH_TIMEOUT_SECONDS / 2:
                return None  # it was backtracking, not waiting for a CPU
    return None
