"""The embedded broker's pruning, against a database that kombu's SQLAlchemy transport
itself filled: delivered messages go once they are old enough, waiting ones stay."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from service.kit.broker import SQLA_PREFIX, prune_delivered
from tests.conftest import empty_postgres_database

# A producer and a consumer as Celery's would be: kombu on its sqla transport. In a
# process of its own, since kombu's models warn under this SQLAlchemy, and the tests
# turn warnings into errors.
_FILL = """
import sys
from kombu import Connection

url, queue, sent, delivered = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with Connection(url) as connection:
    messages = connection.SimpleQueue(queue)
    for number in range(sent):
        messages.put({"number": number})
    for _ in range(delivered):
        messages.get(timeout=30).ack()
    messages.close()
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def broker_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"{SQLA_PREFIX}sqlite:///{tmp_path / 'broker.db'}"
    else:
        # Not the session's database: kombu's tables there are not Runyard's schema.
        with empty_postgres_database() as url:
            yield SQLA_PREFIX + url


def _fill(broker_url: str, queue: str, *, sent: int, delivered: int) -> None:
    subprocess.run(
        [sys.executable, "-c", _FILL, broker_url, queue, str(sent), str(delivered)],
        check=True,
        timeout=120,
    )


def _count(broker_url: str, where: str, **params: object) -> int:
    engine = create_engine(broker_url.removeprefix(SQLA_PREFIX))
    try:
        with engine.connect() as connection:
            query = "SELECT count(*) FROM kombu_message m JOIN kombu_queue q ON m.queue_id = q.id"
            return int(connection.execute(text(f"{query} WHERE {where}"), params).scalar_one())
    finally:
        engine.dispose()


def test_delivered_messages_are_pruned_once_old_enough(broker_url: str) -> None:
    queue = f"prune-{uuid.uuid4().hex[:8]}"
    _fill(broker_url, queue, sent=3, delivered=2)
    ours = "q.name = :queue"
    assert _count(broker_url, f"{ours} AND NOT m.visible", queue=queue) == 2

    # Delivered moments ago: not yet old enough to go.
    assert prune_delivered(broker_url, timedelta(hours=1)) == 0
    assert _count(broker_url, ours, queue=queue) == 3

    delivered_anywhere = _count(broker_url, "NOT m.visible")
    assert prune_delivered(broker_url, timedelta(0)) == delivered_anywhere
    assert _count(broker_url, f"{ours} AND NOT m.visible", queue=queue) == 0
    # The message still waiting for a consumer is kept.
    assert _count(broker_url, f"{ours} AND m.visible", queue=queue) == 1
