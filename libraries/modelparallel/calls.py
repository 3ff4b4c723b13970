"""A call of the script's model, as the pipeline traces, splits and replays it: the
stages are traced with one (``pipeline``) and the split points measured with it
(``splits``), so both sides share this one record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ModelCall:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
