"""Text the databases can hold. PostgreSQL's text cannot hold a NUL, and no UTF-8 column
can hold an unpaired UTF-16 surrogate (what a JSON ``"\\ud800"`` escape decodes to).

Text that instances send is made storable: a script may well print a NUL, and what the
instance meant is kept; only the NUL is replaced. Text a client filters or looks up by is
refused instead, naming the parameter: a repaired value would find something else.
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator

REPLACEMENT = "\ufffd"

Loc = tuple[str | int, ...]


def without_nul(value: str) -> str:
    return value.replace("\x00", REPLACEMENT)


# A string field whose NULs are replaced as it is read.
StorableText = Annotated[str, AfterValidator(without_nul)]


def has_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def unstorable(value: str) -> str | None:
    """Why ``value`` cannot be stored or compared as it is, or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    if has_surrogate(value):
        return "must be valid Unicode, without unpaired surrogates"
    return None


def _refuse_unstorable(value: str) -> str:
    problem = unstorable(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A query parameter that reaches SQL: refused with a 422 that names it, not a 500.
LookupText = Annotated[str, AfterValidator(_refuse_unstorable)]


class Surrogate(NamedTuple):
    """Where decoded JSON holds an unpaired surrogate: the value at ``loc``, or ``key``
    of the object at ``loc`` (which cannot be part of a location: no response could
    carry it)."""

    loc: Loc
    key: str | None


def find_surrogate(value: Any, loc: Loc = ()) -> Surrogate | None:
    """The first unpaired surrogate in decoded JSON, or None."""
    if isinstance(value, str):
        return Surrogate(loc, None) if has_surrogate(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and has_surrogate(key):
                return Surrogate(loc, key)
            if (found := find_surrogate(item, (*loc, key))) is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := find_surrogate(item, (*loc, index))) is not None:
                return found
    return None
