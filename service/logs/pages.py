"""Pages of log lines bounded in bytes as well as in lines, as CloudWatch Logs bounds its
own: a page holds at most PAGE_BYTES of events, each counted as its message's UTF-8 bytes
and CloudWatch's 26 bytes of overhead, and the next token resumes after its last line.

Lines are read from the database a few at a time as the page fills, so a page of long
lines stops reading once it is full rather than after loading every line the query's limit
allows (4,000 lines of 16,000 characters took 5 s and 322 MiB to answer whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import Session

from contract.limits import MAX_LINE

# CloudWatch's limit on one page of GetLogEvents and FilterLogEvents.
PAGE_BYTES = 1024 * 1024
# What CloudWatch counts for each event beside its message.
EVENT_OVERHEAD = 26
# Lines fetched at a time while a page fills (on PostgreSQL, one round trip each): a page
# reads at most this many lines past its end, PAGE_BYTES of lines of MAX_LINE characters.
READ_BATCH = PAGE_BYTES // MAX_LINE

RowT = TypeVar("RowT")


def event_bytes(message: str) -> int:
    return len(message.encode()) + EVENT_OVERHEAD


def filled(
    rows: Iterable[RowT],
    message: Callable[[RowT], str],
    *,
    limit: int,
    budget: int = PAGE_BYTES,
    keep: Callable[[RowT], bool] = lambda _row: True,
) -> tuple[list[RowT], bool]:
    """The rows ``keep`` takes, in order, up to ``limit`` of them and ``budget`` bytes of
    events (always one, however long: a page that could hold nothing would never end);
    and whether any row was left for another page."""
    page: list[RowT] = []
    used = 0
    for row in rows:
        if not keep(row):
            continue
        size = event_bytes(message(row))
        if len(page) == limit or (page and used + size > budget):
            return page, True
        page.append(row)
        used += size
    return page, False


def read_page(
    session: Session,
    query: Select[RowT],
    *,
    limit: int,
    keep: Callable[[RowT], bool] = lambda _row: True,
    message: Callable[[RowT], str] = attrgetter("message"),
) -> tuple[list[RowT], bool]:
    """``filled`` over the rows of ``query`` (one ORM entity a row, a log line unless
    ``message`` says where its text is), fetched READ_BATCH at a time as the page takes
    them: on PostgreSQL through a server-side cursor, closed where the page ends."""
    result = session.scalars(query.execution_options(yield_per=READ_BATCH))
    try:
        return filled(result, message, limit=limit, keep=keep)
    finally:
        result.close()
