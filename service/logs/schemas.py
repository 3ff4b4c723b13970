from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.kit.text import StorableText

MAX_LINES_PER_BATCH = 5000


class LogLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1)
    time: datetime
    stream: Literal["stdout", "stderr", "runtime"]
    message: StorableText = Field(max_length=16 * 1024)


class LogBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lines: list[LogLine] = Field(max_length=MAX_LINES_PER_BATCH)


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
