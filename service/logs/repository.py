"""Storing a batch of log lines in one statement.

A batch is thousands of lines and none is read back in the request, so neither ORM objects
nor SQLAlchemy's per-row parameter handling are spent on them: SQLite takes the rows as one
JSON array, which a single INSERT reads back with its own JSON functions (a quarter less
CPU a line than an executemany of the same rows as tuples, which binds each value from
Python), and PostgreSQL a COPY, which its server applies several times faster than the same
rows as INSERTs. Both write the time column's text as its type would.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from contract.limits import MAX_LINE
from service.kit.db import utc_column_text
from service.logs.models import LogEvent, log_events
from service.logs.schemas import Line

# The columns after job_id and host, in the order of each row _insert takes.
_ROW_COLUMNS = ("stream", "seq", "time", "message")
_COLUMNS = ("job_id", "host", *_ROW_COLUMNS)


def last_seq(session: Session, job_id: str) -> int:
    """The highest line number stored for any host of the job (0 when none): a restarted
    job's instances number their lines on from it."""
    return session.scalar(select(func.max(LogEvent.seq)).where(LogEvent.job_id == job_id)) or 0


# A service line, numbered after the job's last line and stored by one statement: built
# once, as building it (its six values and the read inside) cost more than running it.
_NUMBERED_LINE = insert(log_events).from_select(
    _COLUMNS,
    select(
        bindparam("job_id", type_=log_events.c.job_id.type),
        bindparam("host", type_=log_events.c.host.type),
        bindparam("stream", type_=log_events.c.stream.type),
        func.coalesce(func.max(log_events.c.seq), 0) + 1,
        bindparam("time", type_=log_events.c.time.type),
        bindparam("message", type_=log_events.c.message.type),
    ).where(log_events.c.job_id == bindparam("job_id")),
)


def append_service_line(
    session: Session, job_id: str, host: str, message: str, at: datetime
) -> None:
    """A line of the service's own in the job's log (why it ended, say), after every line
    stored: stored with the job's end, when its instances are gone and can add none. One
    statement numbers and stores it (the number read in the INSERT), not a read and a
    COPY: a stop in line is that many round trips shorter."""
    values = {
        "job_id": job_id,
        "host": host,
        "stream": "runtime",
        "time": at,
        "message": message[:MAX_LINE],
    }
    session.execute(_NUMBERED_LINE, values)


def insert_lines(session: Session, job_id: str, host: str, lines: Sequence[Line]) -> None:
    """Store ``lines`` of ``host`` as they are (the caller leaves out those stored)."""
    rows = [(line.stream, line.seq, utc_column_text(line.micros), line.message) for line in lines]
    if rows:
        _insert(session, job_id, host, rows)


def insert_packed(
    session: Session, job_id: str, host: str, first_seq: int, rows: Sequence[tuple[float, str, str]]
) -> None:
    """Store a packed batch's ``rows`` (time in seconds, stream, message) of ``host``,
    numbered on from ``first_seq``, straight from the rows."""
    stored = [
        (stream, seq, utc_column_text(round(stamp * 1_000_000)), message)
        for seq, (stamp, stream, message) in enumerate(rows, start=first_seq)
    ]
    if stored:
        _insert(session, job_id, host, stored)


# The rows as one JSON array of arrays, read back by SQLite, in the array's order (so ids
# rise with seqs, as they would row by row).
_ROWS = func.json_each(bindparam("rows")).table_valued("value")
_JSON_INSERT = insert(log_events).from_select(
    _COLUMNS,
    select(
        bindparam("job_id", type_=log_events.c.job_id.type),
        bindparam("host", type_=log_events.c.host.type),
        *(func.json_extract(_ROWS.c.value, f"$[{index}]") for index in range(len(_ROW_COLUMNS))),
    ).select_from(_ROWS),
)


def _insert(session: Session, job_id: str, host: str, rows: list[tuple[Any, ...]]) -> None:
    connection = session.connection()
    driver = connection.connection.driver_connection
    assert driver is not None  # an open connection's, inside the request's transaction
    if connection.dialect.name == "postgresql":
        _copy(driver, ((job_id, host, *row) for row in rows))
    elif _sqlite_reads_json():
        batch = json.dumps(rows, ensure_ascii=False)
        connection.execute(_JSON_INSERT, {"job_id": job_id, "host": host, "rows": batch})
    else:
        with closing(driver.cursor()) as cursor:
            cursor.executemany(
                _insert_statement(connection.dialect), ((job_id, host, *row) for row in rows)
            )


def _copy(driver: Any, rows: Iterable[tuple[Any, ...]]) -> None:
    statement = f"COPY {log_events.name} ({', '.join(_COLUMNS)}) FROM STDIN"
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


@functools.cache
def _sqlite_reads_json() -> bool:
    """Whether this process's SQLite has its JSON functions: built in since 3.38, and in
    the builds of earlier ones that Python and the distributions ship, but optional."""
    with closing(sqlite3.connect(":memory:")) as probe:
        try:
            probe.execute("SELECT json_extract('[1]', '$[0]')")
        except sqlite3.OperationalError:
            return False
    return True


@functools.lru_cache(maxsize=4)  # a dialect per database engine: few
def _insert_statement(dialect: Dialect) -> str:
    # SQLAlchemy writes the statement: the driver's placeholders, in _COLUMNS' order.
    values: dict[str, Any] = {column: bindparam(column) for column in _COLUMNS}
    return str(insert(log_events).values(values).compile(dialect=dialect))
