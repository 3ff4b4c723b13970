"""Keyset pages over several columns: the SQL for "after this row, in this order", and the
row's place as JSON for a page token.

Each key is a column (or an expression) and its direction. A key may be missing (NULL) on
some rows: those come after every row that has it, whichever the direction, as SageMaker's
Search orders rows without the property it sorts by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, false, or_, true

from service.kit.db import UTCDateTime
from service.kit.text import unstorable


@dataclass(frozen=True)
class Key:
    column: Any
    descending: bool = False
    # Whether some rows lack it (NULL): they then come last.
    nullable: bool = False

    def ordering(self) -> list[Any]:
        first = [self.column.is_(None)] if self.nullable else []  # false sorts before true
        return [*first, self.column.desc() if self.descending else self.column]

    def beyond(self, value: Any) -> ColumnElement[bool]:
        """Rows past ``value`` on this key alone."""
        if value is None:  # among the rows without it, none is past another
            return false()
        past = self.column < value if self.descending else self.column > value
        return or_(past, self.column.is_(None)) if self.nullable else past

    def level(self, value: Any) -> ColumnElement[bool]:
        """Rows equal to ``value`` on this key."""
        equal: ColumnElement[bool] = (
            self.column.is_(None) if value is None else self.column == value
        )
        return equal


def ordering(keys: Sequence[Key]) -> list[Any]:
    return [term for key in keys for term in key.ordering()]


def after(keys: Sequence[Key], place: Sequence[Any]) -> ColumnElement[bool]:
    """Rows after the one at ``place`` (its value of each key) in ``keys``' order."""
    clause: ColumnElement[bool] = false()
    for key, value in reversed(list(zip(keys, place, strict=True))):
        clause = or_(key.beyond(value), and_(key.level(value), clause))
    return clause if len(keys) else true()


def to_json(place: Sequence[Any]) -> list[Any]:
    return [value.isoformat() if isinstance(value, datetime) else value for value in place]


def from_json(keys: Sequence[Key], given: Any) -> list[Any] | None:
    """A place read back from ``to_json``; None unless it fits ``keys``."""
    if not isinstance(given, list) or len(given) != len(keys):
        return None
    place: list[Any] = []
    for key, value in zip(keys, given, strict=True):
        if value is None:
            if not key.nullable:
                return None
            place.append(None)
            continue
        read = _value(key, value)
        if read is None:
            return None
        place.append(read)
    return place


def _value(key: Key, value: Any) -> Any:
    """``value`` as ``key``'s column holds it, or None if it cannot be one of its values
    (a forged place must not reach SQL, where it would fail)."""
    if isinstance(key.column.type, UTCDateTime):
        if not isinstance(value, str):
            return None
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return None
        return when if when.tzinfo is not None else None
    if key.column.type.python_type is str:
        return value if isinstance(value, str) and not unstorable(value) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value
