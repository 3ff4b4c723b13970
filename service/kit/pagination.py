"""Opaque cursors for keyset pagination: the sort key of the last row of a page."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import TypeVar

from service.kit.errors import SpecError
from service.kit.text import unstorable

IdT = TypeVar("IdT", str, int)


def encode_cursor(time: datetime, row_id: str | int) -> str:
    raw = json.dumps([time.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, id_type: type[IdT]) -> tuple[datetime, IdT]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        time, row_id = json.loads(raw)
        when = datetime.fromisoformat(time)
        if not isinstance(row_id, id_type) or when.tzinfo is None:
            raise TypeError(row_id)
        # Only a forged cursor holds what no row id can (it would reach SQL and fail there).
        if isinstance(row_id, str) and unstorable(row_id):
            raise ValueError(row_id)
        return when, row_id
    except (ValueError, TypeError) as exc:
        raise SpecError(("cursor",), "not a cursor this server issued", source="query") from exc
