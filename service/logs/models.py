"""Every line an instance printed, per host and stream, in the order it was shipped."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import ForeignKey, Index, Integer, String, Table, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.jobs.models import BigIntegerPK
from service.kit.db import Base, UTCDateTime


class LogEvent(Base):
    __tablename__ = "log_events"

    id: Mapped[int] = mapped_column(BigIntegerPK, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(32))
    stream: Mapped[str] = mapped_column(String(8))
    # The runtime numbers each host's lines; a retried batch is recognised by its seq.
    seq: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    message: Mapped[str] = mapped_column(Text)

    # Reads go by host and seq (a follower, a retried batch) or by time (a page); each
    # index is paid for by every line stored.
    __table_args__ = (
        UniqueConstraint("job_id", "host", "seq", name="uq_log_events_job_host_seq"),
        Index("ix_log_events_job_time", "job_id", "time", "id"),
    )


# The table itself, for bulk statements: storing a batch of lines as ORM objects costs
# several times the insert.
log_events = cast(Table, LogEvent.__table__)
