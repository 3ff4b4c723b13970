"""How much of a process's database pools is in use, kept up by the pools' own events."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.pool import QueuePool

from service.kit import db
from service.observability import instruments


def watch_pools() -> None:
    """Watch the pool of every engine the process has made and will make (once)."""
    db.on_every_engine(watch)


def watch(engine: Engine) -> None:
    pool = engine.pool
    if isinstance(pool, QueuePool):
        instruments.POOL_CAPACITY.inc(pool.size() + max(pool._max_overflow, 0))
        # An engine made before it was watched may have connections out already.
        instruments.POOL_CHECKED_OUT.inc(pool.checkedout())

    @event.listens_for(engine, "checkout")
    def _out(*_: Any) -> None:
        instruments.POOL_CHECKED_OUT.inc()

    @event.listens_for(engine, "checkin")
    def _in(*_: Any) -> None:
        instruments.POOL_CHECKED_OUT.dec()
