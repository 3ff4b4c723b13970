"""The embedded broker shared by processes that start together: where another process
creates kombu's tables, or the queue's row, between this one's check and its own
CREATE or INSERT, this one goes on with what the other made. Without that, a worker
that loses the race as its consumer starts dies of it, and every job waits.

The other process is real: a second Python process with kombu's own transport, started at
the moment this one is about to create (caught by SQLAlchemy's statement event)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from service.kit.broker import SQLA_PREFIX
from tests.service.kit.test_broker_prune import broker_url  # noqa: F401 - the fixture

# In a process of its own, as kombu's models warn under this SQLAlchemy and the tests
# turn warnings into errors. It uses Runyard's transport, and starts the other process
# just before its first statement that begins with ``before``.
_RACE = """
import subprocess, sys
from kombu import Connection
from sqlalchemy import event
from sqlalchemy.engine import Engine
from service.kit.broker import SQLA_PREFIX, polling_transport

url, queue, before = sys.argv[1], sys.argv[2], sys.argv[3]
OTHER = (
    "import sys; from kombu import Connection; "
    "c = Connection(sys.argv[1]); c.SimpleQueue(sys.argv[2]).close(); c.release()"
)
raced = []

@event.listens_for(Engine, "before_cursor_execute")
def _the_other_first(connection, cursor, statement, *rest):
    if not raced and " ".join(statement.split()).startswith(before):
        raced.append(statement)
        subprocess.run([sys.executable, "-c", OTHER, url, queue], check=True, timeout=60)

bare = url.removeprefix(SQLA_PREFIX)
with Connection(bare, transport=polling_transport(0.1)) as connection:
    messages = connection.SimpleQueue(queue)
    messages.put({"number": 1})
    assert messages.get(timeout=30).payload == {"number": 1}
    messages.close()
print("raced" if raced else "no race")
"""


@pytest.mark.parametrize(
    # Before its first CREATE of kombu's schema (a table on SQLite, PostgreSQL's sequence
    # first), or before its INSERT of the queue's row.
    "before",
    ["CREATE", "INSERT INTO kombu_queue"],
    ids=["tables", "queue"],
)
def test_a_process_that_loses_the_race_to_create_goes_on_with_the_winners(
    broker_url: str,  # noqa: F811
    before: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RACE, broker_url, "runyard-race", before],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "raced"  # the other process did go first
    engine = create_engine(broker_url.removeprefix(SQLA_PREFIX))
    try:
        with engine.connect() as connection:
            names = connection.execute(text("SELECT name FROM kombu_queue")).scalars().all()
    finally:
        engine.dispose()
    assert names == ["runyard-race"]
