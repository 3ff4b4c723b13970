from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, Strict, model_validator

from contract import protocol
from contract.limits import MAX_LOG_BATCH
from service.kit.db import to_micros
from service.kit.integers import INT32_MAX
from service.kit.protocol import as_message, model_of, validate_body
from service.kit.text import StorableText, without_nul

Message = Annotated[StorableText, Field(max_length=protocol.MAX_MESSAGE)]
# A packed row's message: its NULs are replaced once for the whole batch, where its JSON
# text holds one, not by a validator called for each of thousands of lines.
PackedMessage = Annotated[str, Field(max_length=protocol.MAX_MESSAGE)]
# JSON writes a NUL in a string only as this escape (a raw one is refused).
_NUL_ESCAPE = b"\\u0000"
# A packed line's time, seconds since the epoch in UTC: up to the end of year 9999, as far
# as a datetime goes. A JSON number only (strict: not a string or a boolean that reads as
# one), as the body is stored as it came once validated.
Stamp = Annotated[float, Strict(), Field(ge=0, lt=253_402_300_800, allow_inf_nan=False)]


class Line(NamedTuple):
    """A line as it is stored: numbered by its host, its time in microseconds since the
    epoch (exact, and cheap to turn into a column's text)."""

    seq: int
    micros: int
    stream: str
    message: str


class Packed(NamedTuple):
    """A packed batch's lines as received: ``rows`` of ``(time, stream, message)``, a
    time in seconds since the epoch, numbered on from ``first_seq``. Stored from these
    rows as they are (a line object each cost as much as validating the batch), or as
    ``body``, the JSON text they were validated from, where it is theirs unchanged."""

    first_seq: int
    rows: Sequence[tuple[float, str, str]]
    body: str | None = None


class LogLine(BaseModel):
    """One line of a batch in the object form (``{"lines": [...]}``): what runtimes sent
    before packed batches, and still taken."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1, le=INT32_MAX)  # what the seq column holds
    time: AwareDatetime
    stream: protocol.Stream
    message: Message

    def stored(self) -> Line:
        return Line(self.seq, to_micros(self.time), self.stream, self.message)


def _one_form(batch: Any) -> Any:
    if batch.lines is not None:
        if batch.rows is not None or batch.first_seq is not None:
            raise ValueError("give either lines, or first_seq and rows, not both")
    elif batch.rows is None or batch.first_seq is None:
        raise ValueError("give first_seq and rows (or lines)")
    return batch


# A host's next lines: the contract's packed batch (which the service validates five times
# faster than an object per line, in half the bytes), or the object form, ``lines``.
LogBatchBody = model_of(
    protocol.LogBatch,
    refined={"rows": list[tuple[Stamp, protocol.Stream, PackedMessage]]},
    optional=True,
    extra={"lines": (list[LogLine] | None, Field(default=None, max_length=MAX_LOG_BATCH))},
    validators={"_one_form": model_validator(mode="after")(_one_form)},
)


def received_lines(body: bytes) -> list[Line] | Packed:
    """A ``LogBatchBody``'s lines, validated from its JSON text in one pass: a packed
    batch as it came (NULs replaced), the object form as lines."""
    batch = validate_body(LogBatchBody, body)
    lines: list[LogLine] | None = getattr(batch, "lines", None)
    if lines is not None:
        return [line.stored() for line in lines]
    packed = as_message(protocol.LogBatch, batch)
    if _NUL_ESCAPE in body:
        rows = [(stamp, stream, without_nul(message)) for stamp, stream, message in packed.rows]
        return Packed(packed.first_seq, rows)
    return Packed(packed.first_seq, packed.rows, _as_stored(body))


def _as_stored(body: bytes) -> str | None:
    """The body's text, to be stored as it came, where what it holds is certain to be what
    was validated: one "rows" key (JSON lets a key repeat; a message of "rows" only costs
    the batch being written out again) and UTF-8 text."""
    if body.count(b'"rows"') != 1:
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


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
