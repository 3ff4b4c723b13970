"""Throwaway PostgreSQL databases, for tests and for the benchmarks that set PostgreSQL
beside SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def empty_database(admin_url: str, prefix: str) -> Iterator[str]:
    """The URL of a new, empty database named ``<prefix>_<random>``, on the server that
    ``admin_url`` reaches as a user who may create databases; dropped when done, along
    with any connection still open to it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
