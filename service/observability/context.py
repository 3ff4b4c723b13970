"""What a log line is about: the request being answered and the job being handled, kept
in context variables so every line of the work names them without being handed them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("runyard_request_id", default=None)
job_name: ContextVar[str | None] = ContextVar("runyard_job_name", default=None)

# What a caller's X-Request-ID may be: a proxy's id (a UUID, a hex or base64 string) is
# kept so one id follows the request through; anything else is replaced, never echoed.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:+/=-]{1,128}$")


def request_id_from(header: str | None) -> str:
    """The caller's id when it is one we may repeat, else a new one."""
    if header is not None and _REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


@contextmanager
def handling_job(name: str) -> Iterator[None]:
    """Every line logged inside names job ``name``."""
    token = job_name.set(name)
    try:
        yield
    finally:
        job_name.reset(token)
