"""Regular expressions that users write (``metric_definitions``, ``retry_rules``), run by
RE2 (``google-re2``): time linear in the text searched and memory bounded by the
compiled program, so no pattern can hold an API request or a worker, whatever the line,
and no pattern costs more than ``MAX_PROGRAM_BYTES`` to compile.

RE2's syntax is Python's ``re`` without backreferences and lookaround: what SageMaker's
metric regexes use (groups, classes, lazy and counted repetition, ``\\s``/``\\d``/``\\w``).
A pattern RE2 cannot run, or whose program would be larger than the bound (counted
repetitions nested in one another), is refused with RE2's reason.
"""

from __future__ import annotations

from typing import Any

import re2

# What one compiled pattern may hold (RE2's max_mem): plenty for a metric regex of 500
# characters; ``((a{100}){100}){100}`` asks for far more and is refused.
MAX_PROGRAM_BYTES = 1 << 20

# The most instructions a metric pattern's program may have. Searching a line is linear
# in it where RE2 falls back from its DFA to its NFA, which a pattern can make it do: this
# bounds what one search of one line may cost (about 70 ms for a 16 KiB line here at a
# thousand instructions; ``service.metrics.extraction`` bounds the rest). Metric patterns
# people write have tens (``.*loss=([0-9.]+)`` has 34), a bounded wildcard hundreds
# (``loss: (\S{1,64})`` 715, ``.{0,200}loss=([0-9.]+)`` 1814).
MAX_METRIC_PROGRAM = 2000

Pattern = Any  # google-re2 ships no type information
PatternError = re2.error


def compile_pattern(pattern: str) -> Any:
    """Compile a user's pattern; raises ``PatternError`` naming what is wrong."""
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # the reason is raised; RE2 would print it to stderr too
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise PatternError(describe(exc)) from exc


def describe(exc: Exception) -> str:
    """RE2's reason as text (it gives bytes)."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def search(pattern: Any, text: str) -> Any:
    """The first match in ``text``, or None."""
    return pattern.search(text)


def program_size(pattern: Any) -> int:
    """How many instructions the compiled pattern's program has."""
    size: int = pattern.programsize
    return size
