"""A process keeps enough PostgreSQL connections for the requests it serves at once: under
steady load none is opened and closed again (each would be a new PostgreSQL backend). A
pooled connection that died is replaced before it is handed out, and one in steady use is
handed out without a round trip to check it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import event, text

from service.kit import db
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


def _backend_pid(url: str) -> int:
    with session_scope(url) as session:
        pid: int = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        return pid


def _end_backend(url: str, pid: int) -> None:
    """End a PostgreSQL session from outside, as a server restart or an operator would,
    and wait until it has gone."""
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        deadline = time.monotonic() + 10
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, "the ended session is still there"
            time.sleep(0.01)


def test_a_connection_whose_session_the_server_ended_is_replaced_before_use(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Used a moment ago: only what the server wrote before closing it tells it is dead.
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 3600.0)
    ended = _backend_pid(url)
    _end_backend(url, ended)
    assert _backend_pid(url) != ended  # no error: another connection served it


def test_a_connection_idle_in_the_pool_is_pinged_and_one_in_steady_use_is_not(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = get_engine(url)
    pings: list[object] = []
    ping = engine.dialect.do_ping

    def counted_ping(dbapi_connection: object) -> bool:
        pings.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted_ping)
    for _ in range(5):
        _backend_pid(url)
    assert pings == []
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)
    _backend_pid(url)
    assert len(pings) == 1
