"""Pages of log lines bounded in bytes as well as in lines, as CloudWatch Logs bounds its
own: a page holds at most PAGE_BYTES of events, each counted as its message's UTF-8 bytes
and CloudWatch's 26 bytes of overhead, and the next token resumes after its last line.

Lines are read from the database a few chunks at a time as the page fills
(``service.logs.reading``), so a page of long lines stops reading once it is full rather
than after loading every line a limit allows (4,000 lines of 16,000 characters took 5 s
and 322 MiB to answer whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

# CloudWatch's limit on one page of GetLogEvents and FilterLogEvents.
PAGE_BYTES = 1024 * 1024
# What CloudWatch counts for each event beside its message.
EVENT_OVERHEAD = 26

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
