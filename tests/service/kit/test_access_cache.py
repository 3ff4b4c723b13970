"""What only an administrator changes is remembered by a process for a moment, and a
change made through the process is seen by it once committed."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from service.kit import access_cache
from service.kit.db import session_scope
from service.settings import Settings


class _Reads:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> int:
        self.count += 1
        return self.count


def test_an_answer_is_read_once_for_its_seconds_then_again() -> None:
    reads = _Reads()
    first = [access_cache.remembered("db", "k", 0.2, reads) for _ in range(3)]
    assert (first, reads.count) == ([1, 1, 1], 1)
    time.sleep(0.25)
    assert access_cache.remembered("db", "k", 0.2, reads) == 2


def test_zero_seconds_reads_every_time_and_keys_are_kept_apart() -> None:
    reads = _Reads()
    assert [access_cache.remembered("db", "k", 0, reads) for _ in range(2)] == [1, 2]
    assert access_cache.remembered("db", "k", 60, reads) == 3
    assert access_cache.remembered("db", "other", 60, reads) == 4
    assert access_cache.remembered("another-db", "k", 60, reads) == 5
    assert access_cache.remembered("db", "k", 60, reads) == 3


def test_an_answer_read_while_it_was_forgotten_is_not_kept() -> None:
    """A read that began before a change committed may hold what the change replaced."""
    reads = _Reads()

    def read_racing_a_change() -> int:
        answer = reads()
        access_cache.forget()  # the change commits while the read is on its way
        return answer

    assert access_cache.remembered("db", "k", 60, read_racing_a_change) == 1
    assert access_cache.remembered("db", "k", 60, reads) == 2


def test_a_change_is_forgotten_once_committed_and_not_on_rollback(settings: Settings) -> None:
    reads = _Reads()
    access_cache.remembered("db", "k", 60, reads)

    def change_rolled_back() -> None:
        with session_scope(settings.database_url) as session:
            session.execute(text("SELECT 1"))
            access_cache.forget_once_committed(session)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        change_rolled_back()
    assert access_cache.remembered("db", "k", 60, reads) == 1
    with session_scope(settings.database_url) as session:
        session.execute(text("SELECT 1"))
        access_cache.forget_once_committed(session)
        assert access_cache.remembered("db", "k", 60, reads) == 1  # not committed yet
    assert access_cache.remembered("db", "k", 60, reads) == 2
