"""What only a server administrator changes (the projects, and the places each project's
jobs may use), remembered by a process for a moment.

Every batch of creates asked the database the same two questions (how many projects
there are, and each project's grants and the other projects' read-write ones), in a
session of their own. Remembering them, and reading what is left in the transaction that
stores the batch, took the CPU of the thread that stores creates from 2.2 ms a create to
1.3 ms (batches of four, PostgreSQL). The answers change only when an administrator
creates a project or changes a grant. A change made through this process forgets
everything remembered here once it has committed (``forget_once_committed``); one made
through another process of the same database is seen here within ``seconds`` at most, as
a revoked token is (``token_cache_seconds``). The answers are kept in cachetools'
``TLRUCache`` (each expires after its own ``seconds``), with a generation beside it, as
``service.auth.principal_cache`` keeps tokens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from cachetools import TLRUCache
from sqlalchemy.orm import Session

from service.kit.db import after_commit

T = TypeVar("T")

# Answers remembered at once: a process sees a few projects' worth; past this the least
# recently used are dropped rather than the memory grown.
_SIZE = 1024


def _expires(_key: Any, held: tuple[float, object], now: float) -> float:
    seconds, _answer = held
    return now + seconds


_lock = threading.Lock()
# (database URL, key) -> (how long it is kept, the answer); each expires on its own.
_held: TLRUCache[tuple[str, Hashable], tuple[float, object]] = TLRUCache(
    _SIZE, _expires, time.monotonic
)
# Bumped by each forgetting: an answer read before a change committed, and remembered
# after it, would otherwise outlive the change.
_generation = 0


def remembered(database_url: str, key: Hashable, seconds: float, read: Callable[[], T]) -> T:
    """What ``read`` answers for ``key`` in ``database_url``, read at most every
    ``seconds`` (0: read every time)."""
    if seconds <= 0:
        return read()
    with _lock:
        held = _held.get((database_url, key))
        generation = _generation
    if held is not None:
        return held[1]  # type: ignore[return-value]
    answer = read()
    with _lock:
        if generation == _generation:
            _held[(database_url, key)] = (seconds, answer)
    return answer


def forget() -> None:
    """Forget every answer remembered (of every database)."""
    global _generation
    with _lock:
        _generation += 1
        _held.clear()


def forget_once_committed(session: Session) -> None:
    """For a change of projects or grants: forget what was remembered once the session's
    transaction commits."""
    after_commit(session, forget)
