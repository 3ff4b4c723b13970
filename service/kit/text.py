"""Text that instances send, made storable: PostgreSQL's text cannot hold a NUL, and a
script may well print one. What the instance meant is kept; only the NUL is replaced."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

REPLACEMENT = "\ufffd"


def without_nul(value: str) -> str:
    return value.replace("\x00", REPLACEMENT)


# A string field whose NULs are replaced as it is read.
StorableText = Annotated[str, AfterValidator(without_nul)]
