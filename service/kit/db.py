"""Engines, sessions and the after-commit hook shared by the API and the worker.

The caller owns the transaction (an API request or one reconcile step); repositories only
flush. Work that must not happen unless the data is durable (sending a Celery message) is
registered with :func:`after_commit` and dropped on rollback.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from select import POLLIN, poll
from typing import Any

from sqlalchemy import DateTime, Engine, create_engine, event, func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

_AFTER_COMMIT = "runyard_after_commit"


class Base(DeclarativeBase):
    pass


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every database (SQLite has no time zones of its own)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch: exact for any year."""
    return (value - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def utc_column_text(micros: int) -> str:
    """What a UTCDateTime column holds for ``micros`` on SQLite (SQLAlchemy's storage
    format, naive UTC), which PostgreSQL's timestamp reads as the same time: for bulk
    writes that bypass the type, thousands of lines a second. The date and time of day are
    formatted once a second."""
    second, micro = divmod(micros, 1_000_000)
    return f"{_second_text(second)}.{micro:06d}"


@functools.lru_cache(maxsize=64)
def _second_text(second: int) -> str:
    return (EPOCH + timedelta(seconds=second)).replace(tzinfo=None).isoformat(" ")


def normalize_database_url(url: str) -> str:
    # Plain postgresql:// would pick psycopg2, which Runyard does not install.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


_READONLY = "runyard_readonly"
# How long a write waits for SQLite's lock before failing, and first for its turn among
# the writers of its process.
SQLITE_BUSY_SECONDS = 30
WRITE_TURN_SECONDS = 30
# Marks a pooled SQLite connection whose transaction holds its process's writing turn.
_HOLDS_TURN = "runyard_holds_turn"


@dataclass(frozen=True)
class _Registered:
    engine: Engine
    sessions: sessionmaker[Session]
    readonly_sessions: sessionmaker[Session]
    autocommit_reads: sessionmaker[Session]


# One engine (and connection pool) per database URL for the life of the process; a
# process talks to one or two databases. (An evicting cache would drop engines whose pools
# still hold open connections.)
_engines: dict[str, _Registered] = {}
_engines_lock = threading.Lock()


# Called with each engine as it is made (the pool's metrics watch them).
_engine_hooks: list[Callable[[Engine], None]] = []


def on_every_engine(hook: Callable[[Engine], None]) -> None:
    """Call ``hook`` with every engine this process has made and will make."""
    with _engines_lock:
        if hook in _engine_hooks:
            return
        _engine_hooks.append(hook)
        made = [entry.engine for entry in _engines.values()]
    for engine in made:
        hook(engine)


_DATABASE_URL = "runyard_database_url"


def database_url_of(session: Session) -> str | None:
    """The database URL ``session`` was made for (as ``get_sessionmaker`` was given it),
    or None for a session made otherwise."""
    url = session.info.get(_DATABASE_URL)
    return url if isinstance(url, str) else None


def get_engine(url: str) -> Engine:
    return _registered(url).engine


def get_sessionmaker(url: str, *, readonly: bool = False) -> sessionmaker[Session]:
    """Sessions for ``url``; ``readonly`` ones never take SQLite's write lock."""
    registered = _registered(url)
    return registered.readonly_sessions if readonly else registered.sessions


def _registered(url: str) -> _Registered:
    with _engines_lock:
        entry = _engines.get(url)
        if entry is None:
            engine = _create_engine(normalize_database_url(url))
            for hook in _engine_hooks:
                hook(engine)
            readonly = engine.execution_options(**{_READONLY: True})
            # SQLite's transactions cost no round trip: its reads keep their BEGIN.
            autocommit = (
                readonly
                if engine.dialect.name == "sqlite"
                else readonly.execution_options(isolation_level="AUTOCOMMIT")
            )
            # Each session knows the URL it was made for (``database_url_of``).
            info = {_DATABASE_URL: url}
            entry = _engines[url] = _Registered(
                engine,
                sessionmaker(bind=engine, expire_on_commit=False, info=info),
                sessionmaker(bind=readonly, expire_on_commit=False, info=info),
                sessionmaker(bind=autocommit, expire_on_commit=False, info=info),
            )
        return entry


# Connections a process keeps open to PostgreSQL, and how many more it may open for a
# moment. A request holds up to one at a time (its credentials' read, then its own):
# fewer kept than requests in flight, and under load each request above them opened a
# connection and closed it again, a new PostgreSQL backend each time (with 8 clients, a
# connection per 10 creations). AnyIO runs at most 40 requests' threads at once.
POOL_SIZE = 10
POOL_OVERFLOW = 30


def _create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_SECONDS, "check_same_thread": False}
        )
        _configure_sqlite(engine)
        return engine
    engine = create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    _ping_when_in_doubt(engine)
    return engine


# A pooled PostgreSQL connection idle this long is pinged before it is used again.
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "runyard_idle_since"


def _ping_when_in_doubt(engine: Engine) -> None:
    """Ping a pooled connection (SELECT 1, SQLAlchemy's own ping) before it is used again
    only when it may have died in the pool: it sat there PING_AFTER_IDLE_SECONDS or
    more, or its server wrote to it meanwhile. A server that ends a session (a restart,
    pg_terminate_backend, an idle timeout) says so and closes the socket, which a poll
    sees without a round trip. A dead connection is replaced before it is handed out,
    as with ``pool_pre_ping``; but that pinged on every checkout, a round trip in every
    batch of creates, about a tenth of what a lone create's transaction cost the API.
    (HikariCP skips its check the same way for a connection used within 500 ms.)"""

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop(_IDLE_SINCE, None)
        recent = idle_since is not None and time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS
        if recent and not _server_has_written(dbapi_connection):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards it and checks out another (or connects anew).
            raise DisconnectionError("a pooled connection failed its ping") from exc


def _server_has_written(dbapi_connection: Any) -> bool:
    """Whether an idle psycopg connection has something to read: between transactions
    the server sends nothing unless it is ending the session (Runyard does not LISTEN)."""
    try:
        poller = poll()  # select() fails on descriptors past 1023
        poller.register(dbapi_connection.fileno(), POLLIN)
    except Exception:  # no socket (closed already): in doubt
        return True
    return bool(poller.poll(0))


def _configure_sqlite(engine: Engine) -> None:
    # The API and the worker are separate processes writing one file: WAL lets readers
    # proceed during a write, and BEGIN IMMEDIATE takes the write lock up front so two
    # writers queue on busy_timeout instead of failing when a read upgrades to a write.
    # Read-only sessions begin deferred and never hold the write lock.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_SECONDS * 1000}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    # Within one process, writers take turns on a lock before asking SQLite: a writer
    # SQLite finds busy sleeps in steps of up to 100 ms before trying again, long after
    # the lock has freed, so under load a create waited up to seconds for a lock held a
    # few milliseconds at a time. Writers of other processes still queue on busy_timeout.
    # The turn ends when the connection goes back to the pool, after its commit or
    # rollback; a plain Lock, as that may happen on another thread than the begin.
    turn = threading.Lock()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        readonly = connection.get_execution_options().get(_READONLY)
        # A thread that already holds a turn (a second write session inside a first)
        # would wait for itself: after the busy timeout it goes on as before the turns.
        if not readonly and turn.acquire(timeout=WRITE_TURN_SECONDS):
            connection.connection.record_info[_HOLDS_TURN] = True
        connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        if record.record_info.pop(_HOLDS_TURN, False):
            turn.release()


def read_pages_in_index_order(session: Session) -> None:
    """For the rest of the transaction, have PostgreSQL read a keyset page (ORDER BY ...
    LIMIT) off an index in the page's order rather than sort. Without statistics that
    know the filter's value (autovacuum off, a new project, a burst of jobs since it last
    ran) it estimated a row or two, then read and sorted every matching row for each page:
    5 ms for 3,100 jobs, or every line of a job's log, and growing with them. A sort where
    no index gives the order still happens; SQLite's planner needs no telling."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.set_config("enable_sort", "off", True)))


@contextmanager
def autocommit_reads(url: str) -> Iterator[Session]:
    """Reads that need no transaction around them, such as every request's check of its
    credentials. Under PostgreSQL's READ COMMITTED each statement takes its own snapshot
    inside a transaction too, so leaving the transaction out changes nothing read, and
    spares two round trips (BEGIN, ROLLBACK). Not for locks (``FOR UPDATE``, advisory
    ``xact`` locks): each would be let go as its statement ends."""
    session = _registered(url).autocommit_reads()
    try:
        yield session
    finally:
        session.close()


@contextmanager
def session_scope(url: str, *, readonly: bool = False) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error."""
    session = get_sessionmaker(url, readonly=readonly)()
    try:
        yield session
    except BaseException:
        end_session(session, committed=False)
        raise
    end_session(session, committed=True)


def end_session(session: Session, *, committed: bool) -> None:
    """Commit (or roll back) and close a session; a commit that fails is rolled back."""
    try:
        if committed:
            session.commit()
        else:
            session.rollback()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's current transaction has committed."""
    session.info.setdefault(_AFTER_COMMIT, []).append(callback)


@event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    callbacks = session.info.pop(_AFTER_COMMIT, [])
    for callback in callbacks:
        callback()


@event.listens_for(Session, "after_soft_rollback")
def _drop_after_commit(session: Session, _previous_transaction: Any) -> None:
    session.info.pop(_AFTER_COMMIT, None)
