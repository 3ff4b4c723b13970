"""How many followed logs an API process streams at once: in all, and for each token.
One more is refused with 429 and Retry-After."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Hashable

from service.kit.errors import TooManyRequests

# What a refused stream is told to wait before asking again.
RETRY_AFTER_SECONDS = 5


class Slot:
    """One stream's place among those a process serves; given back once, however often
    ``release`` is called."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class StreamSlots:
    """The streams a process serves at once: ``most`` in all, ``most_each`` per holder
    (a token)."""

    def __init__(self, most: int, most_each: int) -> None:
        self.most = most
        self.most_each = most_each
        self._lock = threading.Lock()
        self._held: Counter[Hashable] = Counter()

    @property
    def open(self) -> int:
        return self._held.total()

    def take(self, holder: Hashable) -> Slot:
        with self._lock:
            if self._held.total() >= self.most:
                raise TooManyRequests(
                    f"this server streams {self.most} followed logs at once, its most; "
                    "ask again later, or read the log's pages",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            if self._held[holder] >= self.most_each:
                raise TooManyRequests(
                    f"a token may follow {self.most_each} logs at once; close one of its "
                    "streams, or ask again later",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self._held[holder] += 1
        return Slot(functools.partial(self._give_back, holder))

    def _give_back(self, holder: Hashable) -> None:
        with self._lock:
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]
