"""Who holds a bearer token, remembered by an API process for a moment.

Every request names its token, and under load one client sends hundreds a second: reading
the token's row for each cost a sixth of the API's time per job created. A token's holder
does not change while it is in force (its name, project and role are fixed when it is
minted), so what can change is only that it is revoked. A revocation made through this
process forgets every holder it remembers once the revocation has committed; one made
through another API replica of the same database is seen here within ``seconds`` at most.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from service.auth.access import Principal

# Tokens remembered at once: far more than the clients of one deployment.
_SIZE = 4096


class PrincipalCache:
    """Token hash → its holder, each kept ``seconds`` (0: nothing is kept)."""

    def __init__(self, seconds: float, timer: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._held: TTLCache[str, Principal] = TTLCache(_SIZE, max(seconds, 1e-9), timer)
        self._lock = threading.Lock()
        # Bumped by each forgetting: a holder read from the database before a revocation
        # committed, and remembered after it, would otherwise outlive the revocation.
        self._generation = 0

    @property
    def generation(self) -> int:
        """Take this before reading a holder from the database; give it to ``remember``."""
        return self._generation

    def get(self, token_hash: str) -> Principal | None:
        with self._lock:
            return self._held.get(token_hash)

    def remember(self, token_hash: str, principal: Principal, generation: int) -> None:
        with self._lock:
            if self._seconds > 0 and generation == self._generation:
                self._held[token_hash] = principal

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._held.clear()
