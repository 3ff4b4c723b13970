"""How much of a process's database pool is in use, kept up by the pool's own events."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.pool import QueuePool

from service.observability import instruments


def watch(engine: Engine) -> None:
    pool = engine.pool
    if isinstance(pool, QueuePool):
        instruments.POOL_CAPACITY.inc(pool.size() + max(pool._max_overflow, 0))

    @event.listens_for(engine, "checkout")
    def _out(*_: Any) -> None:
        instruments.POOL_CHECKED_OUT.inc()

    @event.listens_for(engine, "checkin")
    def _in(*_: Any) -> None:
        instruments.POOL_CHECKED_OUT.dec()
