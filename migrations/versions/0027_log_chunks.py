"""Log lines stored a chunk to a row

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06

Each host's runs of lines with consecutive seqs become chunks, cut as the service cuts
them (service.logs.repository), each chunk's text a packed batch of its lines
({"rows": [[seconds since the epoch, stream, message], ...]}); each line keeps its seq,
time, stream and message. Times are UTC without a zone in both databases, as
SQLAlchemy's DateTime writes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# As service.logs.models, when this revision was written.
_CHUNK_LINES = 8192
_CHUNK_CHARACTERS = 512 * 1024
_CHUNK_SPAN_MICROS = 30_000_000
# Lines read (or chunks, going back) at a time.
_BATCH = 10_000

_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)

_events = sa.table(
    "log_events",
    sa.column("id", sa.BigInteger),
    sa.column("job_id", sa.String),
    sa.column("host", sa.String),
    sa.column("stream", sa.String),
    sa.column("seq", sa.Integer),
    sa.column("time", sa.DateTime),
    sa.column("message", sa.Text),
)
_chunks = sa.table(
    "log_chunks",
    sa.column("id", sa.BigInteger),
    sa.column("job_id", sa.String),
    sa.column("host", sa.String),
    sa.column("first_seq", sa.Integer),
    sa.column("last_seq", sa.Integer),
    sa.column("first_time", sa.DateTime),
    sa.column("last_time", sa.DateTime),
    sa.column("lines", sa.Text),
)


def _id_column() -> sa.Column[Any]:
    return sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    )


def upgrade() -> None:
    op.create_table(
        "log_chunks",
        _id_column(),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("host", sa.String(32), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("first_time", sa.DateTime(), nullable=False),
        sa.Column("last_time", sa.DateTime(), nullable=False),
        sa.Column("lines", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["training_jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "host", "last_seq", name="uq_log_chunks_job_host_seq"),
    )
    op.create_index(
        "ix_log_chunks_job_time", "log_chunks", ["job_id", "first_time", "id"]
    )
    connection = op.get_bind()
    for values in _batches(_chunked(_stored_lines(connection))):
        connection.execute(_chunks.insert(), values)
    op.drop_table("log_events")


def _stored_lines(connection: sa.Connection) -> Iterator[Any]:
    """Every stored line in (job, host, seq) order, read a batch at a time."""
    key = sa.tuple_(_events.c.job_id, _events.c.host, _events.c.seq)
    query = sa.select(_events).order_by(_events.c.job_id, _events.c.host, _events.c.seq)
    after: tuple[str, str, int] | None = None
    while True:
        batch = query if after is None else query.where(key > sa.tuple_(*after))
        rows = connection.execute(batch.limit(_BATCH)).all()
        yield from rows
        if len(rows) < _BATCH:
            return
        after = (rows[-1].job_id, rows[-1].host, rows[-1].seq)


def _chunked(lines: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """The lines as chunks: a run of one host's consecutive seqs, cut at _CHUNK_LINES,
    _CHUNK_CHARACTERS or a span of _CHUNK_SPAN_MICROS."""
    run: list[Any] = []
    low = high = characters = 0
    for line in lines:
        micros = (line.time - _EPOCH) // _MICROSECOND
        if run:
            last = run[-1]
            if (
                (line.job_id, line.host, line.seq) != (last.job_id, last.host, last.seq + 1)
                or len(run) == _CHUNK_LINES
                or characters + len(line.message) > _CHUNK_CHARACTERS
                or max(high, micros) - min(low, micros) > _CHUNK_SPAN_MICROS
            ):
                yield _chunk(run)
                run = []
        if not run:
            low = high = micros
            characters = 0
        run.append(line)
        low, high = min(low, micros), max(high, micros)
        characters += len(line.message)
    if run:
        yield _chunk(run)


def _chunk(run: list[Any]) -> dict[str, Any]:
    times = [line.time for line in run]
    rows = [
        [((line.time - _EPOCH) // _MICROSECOND) / 1_000_000, line.stream, line.message]
        for line in run
    ]
    return {
        "job_id": run[0].job_id,
        "host": run[0].host,
        "first_seq": run[0].seq,
        "last_seq": run[-1].seq,
        "first_time": min(times),
        "last_time": max(times),
        "lines": json.dumps({"rows": rows}, ensure_ascii=False),
    }


def _batches(chunks: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    lines = 0
    for chunk in chunks:
        batch.append(chunk)
        lines += chunk["last_seq"] - chunk["first_seq"] + 1
        if lines >= _BATCH:
            yield batch
            batch, lines = [], 0
    if batch:
        yield batch


def downgrade() -> None:
    op.create_table(
        "log_events",
        _id_column(),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("host", sa.String(32), nullable=False),
        sa.Column("stream", sa.String(8), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["training_jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "host", "seq", name="uq_log_events_job_host_seq"),
    )
    op.create_index("ix_log_events_job_time", "log_events", ["job_id", "time", "id"])
    connection = op.get_bind()
    query = sa.select(_chunks).order_by(_chunks.c.id)
    after = 0
    while True:
        chunks = connection.execute(query.where(_chunks.c.id > after).limit(_BATCH // 100)).all()
        for chunk in chunks:
            rows = json.loads(chunk.lines)["rows"]
            connection.execute(
                _events.insert(),
                [
                    {
                        "job_id": chunk.job_id,
                        "host": chunk.host,
                        "stream": stream,
                        "seq": chunk.first_seq + index,
                        "time": _EPOCH + round(stamp * 1_000_000) * _MICROSECOND,
                        "message": message,
                    }
                    for index, (stamp, stream, message) in enumerate(rows)
                ],
            )
        if len(chunks) < _BATCH // 100:
            break
        after = chunks[-1].id
    op.drop_table("log_chunks")
