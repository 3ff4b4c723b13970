"""On SQLite, the writers of one process take turns before asking for the database's
lock, so none of them meets it held by another and sleeps in SQLite's busy back-off."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from service.kit import db


def _table(url: str) -> None:
    with db.get_engine(url).begin() as connection:
        connection.exec_driver_sql("CREATE TABLE numbers (n INTEGER)")


def test_a_writer_waits_for_its_turn_not_for_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no busy timeout at all, SQLite refuses a second writer at once.
    monkeypatch.setattr(db, "SQLITE_BUSY_SECONDS", 0)
    url = f"sqlite:///{tmp_path / 'turns.db'}"
    _table(url)
    holding, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def write(number: int, hold: bool) -> None:
        try:
            with db.session_scope(url) as session:
                session.execute(text("INSERT INTO numbers VALUES (:n)"), {"n": number})
                if hold:
                    holding.set()
                    done.wait(10)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    first = threading.Thread(target=write, args=(1, True))
    first.start()
    assert holding.wait(10)
    # A connection that does not take turns meets the held lock and is refused: the
    # database is busy, and SQLite would not wait.
    outsider = sqlite3.connect(tmp_path / "turns.db", timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        outsider.execute("BEGIN IMMEDIATE")
    outsider.close()
    second = threading.Thread(target=write, args=(2, False))
    second.start()
    time.sleep(0.2)
    assert second.is_alive()  # waiting for its turn
    done.set()
    first.join(10)
    second.join(10)
    assert errors == []
    with db.session_scope(url, readonly=True) as session:
        assert list(session.scalars(text("SELECT n FROM numbers ORDER BY n"))) == [1, 2]
    db.get_engine(url).dispose()


def test_readers_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'turns.db'}"
    _table(url)
    with db.session_scope(url) as writer:
        writer.execute(text("INSERT INTO numbers VALUES (1)"))
        # Same thread, while the write is open: a reader needs no turn.
        with db.session_scope(url, readonly=True) as reader:
            assert reader.scalar(text("SELECT count(*) FROM numbers")) == 0
    db.get_engine(url).dispose()
