"""Schema migrations: the same Alembic scripts for the server, compose and the tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from service.kit.db import get_engine

# The PostgreSQL advisory lock that preparing a database takes: "RUNYARD" as a number.
PREPARE_LOCK = int.from_bytes(b"RUNYARD")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    config = alembic_config(database_url)
    with get_engine(database_url).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


@contextmanager
def one_at_a_time(database_url: str) -> Iterator[None]:
    """Held by one process at a time per PostgreSQL database: several processes that
    prepare one new database at once (API replicas and the migration Job of a fresh
    Kubernetes install) would each create its tables, and all but one fail. SQLite lets
    one writer in at a time by itself."""
    engine = get_engine(database_url)
    if engine.dialect.name != "postgresql":
        yield
        return
    # A session-level lock on a connection of its own, in autocommit: it outlives the
    # transactions of what it guards, and nothing is left open on the connection after.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": PREPARE_LOCK})
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PREPARE_LOCK})
