"""A process keeps enough PostgreSQL connections for the requests it serves at once: under
steady load none is opened and closed again (each would be a new PostgreSQL backend)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import event, text

from service.kit.db import get_engine, session_scope
from tests.conftest import empty_postgres_database

pytestmark = pytest.mark.postgres

# The bench's clients: requests in flight at once.
AT_ONCE = 8


@pytest.fixture
def url() -> Iterator[str]:
    # A database of this test's own: its engine (and pool) is new.
    with empty_postgres_database() as fresh:
        yield fresh
        get_engine(fresh).dispose()


def _sessions_at_once(url: str) -> None:
    """AT_ONCE sessions, each holding its connection until all have one."""
    all_in = threading.Barrier(AT_ONCE)

    def hold() -> None:
        with session_scope(url) as session:
            session.execute(text("SELECT 1"))
            all_in.wait(timeout=30)

    threads = [threading.Thread(target=hold) for _ in range(AT_ONCE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_requests_in_flight_reuse_the_connections_kept(url: str) -> None:
    opened: list[object] = []
    event.listen(get_engine(url), "connect", lambda connection, _record: opened.append(connection))
    _sessions_at_once(url)
    assert len(opened) == AT_ONCE
    for _ in range(3):
        _sessions_at_once(url)
    assert len(opened) == AT_ONCE  # none opened again
