"""Integers in request bodies, bounded where they are read.

Python converts no integer of more than ``sys.get_int_max_str_digits()`` digits (4,300)
from text: ``json.loads`` raises a ValueError deep inside, which names no member. Read
with ``json_loads``, such an integer is kept as a ``TooLong`` instead, which the checks
of the request refuse by the member's name. Smaller integers out of a field's range are
its schema's to refuse: ``Int32`` for what a database Integer column holds.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

# Defined with the instance protocol, whose seqs, attempts and exit statuses are these.
from contract.protocol import INT32_MAX as INT32_MAX
from contract.protocol import INT32_MIN as INT32_MIN

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# What an Integer column holds (PostgreSQL's are 32 bits), exit statuses among them.
Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]


@dataclass(frozen=True)
class TooLong:
    """An integer a request gave with more digits than Python converts: only its sign."""

    negative: bool

    def as_float(self) -> float:
        """Beyond any bound, on its side of zero."""
        return -float("inf") if self.negative else float("inf")


def most_digits() -> int:
    """The most digits of an integer Python converts from text (0: no limit)."""
    return sys.get_int_max_str_digits()


def json_loads(text: bytes | str) -> Any:
    """``json.loads``, with each integer of more digits than Python converts kept as a
    ``TooLong``; raises what ``json.loads`` raises for text that is not JSON."""
    return json.loads(text, parse_int=_parse_int)


def first_too_long(value: Any) -> tuple[str | int, ...] | None:
    """Where the first ``TooLong`` of a parsed body is: the keys and indices to it."""
    # A stack, not recursion: JSON nests as deep as the parser allowed.
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        loc, item = stack.pop()
        if isinstance(item, TooLong):
            return loc
        stack.extend(((*loc, key), each) for key, each in reversed(_children(item)))
    return None


def _children(value: Any) -> list[tuple[str | int, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value))
    return []


def _parse_int(text: str) -> int | TooLong:
    limit = most_digits()
    negative = text.startswith("-")
    if limit and len(text) - negative > limit:
        return TooLong(negative)
    return int(text)
