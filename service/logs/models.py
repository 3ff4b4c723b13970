"""Every line an instance printed, stored a chunk at a time: a run of one host's lines with
consecutive seqs, as they were shipped together.

A row a line cost more to store than everything else the service does with a line (on
SQLite, its insert alone took about 2 µs of the 6 µs a line cost the API): the chunk's
lines are one JSON text, and a chunk's row says what readers look for before they read
that text (its host, its seqs, its earliest and latest times).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import ForeignKey, Index, Integer, String, Table, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from contract.limits import MAX_LOG_BATCH
from service.jobs.models import BigIntegerPK
from service.kit.db import Base, UTCDateTime

# The most lines a chunk holds: a line's id is its chunk's id times this, plus its place
# in the chunk, so ids rise as lines arrived (ties in time are ordered by them).
CHUNK_LINES = 8192
assert MAX_LOG_BATCH <= CHUNK_LINES  # a shipped batch fits one chunk
# The most characters of messages a chunk holds (a reader decodes whole chunks, and a page
# is at most 1 MB).
CHUNK_CHARACTERS = 512 * 1024
# The longest a chunk's lines span in time: a reader that starts at a time looks at the
# chunks that begin this much earlier, and no further back.
CHUNK_SPAN = timedelta(seconds=30)


class LogChunk(Base):
    __tablename__ = "log_chunks"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(32))
    # The runtime numbers each host's lines; the chunk's are first_seq..last_seq, each one.
    first_seq: Mapped[int] = mapped_column(Integer)
    last_seq: Mapped[int] = mapped_column(Integer)
    # The earliest and the latest of its lines' times (not necessarily its first and last).
    first_time: Mapped[datetime] = mapped_column(UTCDateTime)
    last_time: Mapped[datetime] = mapped_column(UTCDateTime)
    # A packed batch of the lines, in seq order, as the runtime sends one: {"rows": [[time
    # in seconds since the epoch, stream, message], ...]}, and whatever else the batch held
    # (its first_seq, which the columns above say).
    lines: Mapped[str] = mapped_column(Text)

    # Reads go by host and seq (a follower, a retried batch, a stream's pages) or by time
    # (a page of the job's lines merged across hosts); a host's seqs never overlap, so its
    # last_seqs are unique and ordered as its chunks are.
    __table_args__ = (
        UniqueConstraint("job_id", "host", "last_seq", name="uq_log_chunks_job_host_seq"),
        Index("ix_log_chunks_job_time", "job_id", "first_time", "id"),
    )


# The table itself, for Core statements.
log_chunks = cast(Table, LogChunk.__table__)
