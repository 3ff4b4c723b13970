"""Pages of a listing whose filters no index answers, read a window of rows at a time.

A filter an index answers (a project, a status, a range of creation times in that order)
lets the database go straight to the page's rows. Any other (a part of a name, a tag in a
job's record) is tested row by row, and a filter that few rows pass would have the
database read every row of the listing for one page, a cost that grows with what is
stored: a tag is read out of the job's record, hundreds of KiB of JSON on some jobs. Such
a page looks at a window of at most ``SCAN_ROWS`` rows in the listing's order instead,
found through the index, and gives back the ones that pass: fewer than asked for, maybe
none, with a position to go on from, as DynamoDB's and CloudWatch's pages do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Row, Select
from sqlalchemy.orm import Session

# The most rows one page looks at for filters no index answers.
SCAN_ROWS = 300

# A query of any columns.
Query = Select[*tuple[Any, ...]]


def page_of_window(
    session: Session,
    window: Query,
    matching: Callable[[list[Any]], Query],
    *,
    limit: int,
    scan_rows: int | None = None,
) -> tuple[list[Row[Any]], Row[Any] | None]:
    """Up to ``limit`` rows of ``matching(ids)``, in ``window``'s order, from its first
    ``scan_rows`` rows; and the row to go on after (the last one given back, or the last
    one looked at), or None once the listing has no more.

    ``window`` is the listing in its order with only what its index answers, selecting
    the rows' ``id``; ``matching`` selects the rows of those ids, with ``id``, that pass
    the other filters, in any order. ``scan_rows``: SCAN_ROWS unless told."""
    scan_rows = SCAN_ROWS if scan_rows is None else scan_rows
    looked_at: Sequence[Row[Any]] = session.execute(window.limit(scan_rows + 1)).all()
    cut = len(looked_at) > scan_rows
    looked_at = looked_at[:scan_rows]
    if not looked_at:
        return [], None
    passed = {row.id: row for row in session.execute(matching([row.id for row in looked_at]))}
    page = [passed[row.id] for row in looked_at if row.id in passed]
    if len(page) > limit:
        return page[:limit], page[limit - 1]
    return page, looked_at[-1] if cut else None
