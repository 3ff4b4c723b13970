from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, NamedTuple, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from contract.limits import MAX_LINE, MAX_LOG_BATCH
from service.kit.db import to_micros
from service.kit.integers import INT32_MAX
from service.kit.text import StorableText

Stream = Literal["stdout", "stderr", "runtime"]
Message = Annotated[StorableText, Field(max_length=MAX_LINE)]
# A packed line's time, seconds since the epoch in UTC: up to the end of year 9999, as far
# as a datetime goes.
Stamp = Annotated[float, Field(ge=0, lt=253_402_300_800, allow_inf_nan=False)]


class Line(NamedTuple):
    """A line as it is stored: numbered by its host, its time in microseconds since the
    epoch (exact, and cheap to turn into a column's text)."""

    seq: int
    micros: int
    stream: str
    message: str


class LogLine(BaseModel):
    """One line of a batch in the object form (``{"lines": [...]}``): what runtimes sent
    before packed batches, and still taken."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1, le=INT32_MAX)  # what the seq column holds
    time: AwareDatetime
    stream: Stream
    message: Message

    def stored(self) -> Line:
        return Line(self.seq, to_micros(self.time), self.stream, self.message)


class LogBatch(BaseModel):
    """A host's next lines, packed: ``rows`` of ``[time, stream, message]`` numbered on
    from ``first_seq``, which the service validates five times faster than an object per
    line, in half the bytes. The object form, ``lines``, is taken as well."""

    model_config = ConfigDict(extra="forbid")

    # The last row's number, too, fits the seq column.
    first_seq: int | None = Field(default=None, ge=1, le=INT32_MAX - MAX_LOG_BATCH)
    rows: list[tuple[Stamp, Stream, Message]] | None = Field(default=None, max_length=MAX_LOG_BATCH)
    lines: list[LogLine] | None = Field(default=None, max_length=MAX_LOG_BATCH)

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        if self.lines is not None:
            if self.rows is not None or self.first_seq is not None:
                raise ValueError("give either lines, or first_seq and rows, not both")
        elif self.rows is None or self.first_seq is None:
            raise ValueError("give first_seq and rows (or lines)")
        return self

    def stored(self) -> list[Line]:
        if self.lines is not None:
            return [line.stored() for line in self.lines]
        assert self.rows is not None  # _one_form
        assert self.first_seq is not None
        return [
            Line(seq, round(stamp * 1_000_000), stream, message)
            for seq, (stamp, stream, message) in enumerate(self.rows, start=self.first_seq)
        ]


class LogEventPublic(BaseModel):
    id: int
    time: datetime
    host: str
    seq: int
    stream: str
    message: str


class LogsPage(BaseModel):
    events: list[LogEventPublic]
    next_cursor: str | None
