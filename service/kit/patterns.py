"""Regular expressions that users write (``metric_definitions``, ``retry_rules``), run
with a time limit: a pattern that backtracks without end on some line must not hold an
API request or a worker. The ``regex`` engine takes Python's ``re`` syntax (its VERSION0
is ``re``-compatible) and, unlike ``re``, can stop a search that runs too long.
"""

from __future__ import annotations

import regex

# Far above what a sane pattern takes on a 16 KiB line; a search past it finds nothing.
SEARCH_TIMEOUT_SECONDS = 0.05

Pattern = regex.Pattern
PatternError = regex.error


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """Compile a user's pattern; raises ``PatternError`` naming what is wrong."""
    return regex.compile(pattern, flags=regex.VERSION0)


def search(pattern: regex.Pattern[str], text: str) -> regex.Match[str] | None:
    """The first match in ``text``, or None, also when the search ran out of time."""
    try:
        return pattern.search(text, timeout=SEARCH_TIMEOUT_SECONDS)
    except TimeoutError:
        return None
