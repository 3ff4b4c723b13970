"""Page tokens for listings answered from an offset: the offset, and a digest of the
request the token was given for, so that a token is good only for the same request
(whatever its page size): one of another request is refused, not read as some other page.
A token is no secret (a client could make one): its offset only slices what the caller
may see anyway."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any


def digest(params: Mapping[str, Any], ignored: Collection[str]) -> str:
    """What a token is good for: the request, without the members in ``ignored`` (the
    token itself, the page size)."""
    asked = {key: value for key, value in params.items() if key not in ignored}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


def token(offset: int, request_digest: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([offset, request_digest]).encode()).decode()


def offset_in(params: Mapping[str, Any], request_digest: str, refusal: Exception) -> int:
    """The offset the request's ``NextToken`` holds (0 without one); raises ``refusal``
    for a token this server did not give for this request."""
    if "NextToken" not in params:
        return 0
    offset = offset_of(params["NextToken"], request_digest)
    if offset is None:
        raise refusal
    return offset


def offset_of(given: str, request_digest: str) -> int | None:
    """The offset ``given`` holds, or None unless this server gave it for this request."""
    try:
        offset, kept = json.loads(base64.urlsafe_b64decode(given.encode()))
    except (ValueError, TypeError, binascii.Error):
        return None
    if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0:
        return offset if kept == request_digest else None
    return None
