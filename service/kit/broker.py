"""How the API and the worker reach the broker: the same URL, transport and queue for the
one that only sends and the one that also consumes.

The embedded broker is kombu's SQLAlchemy transport, polled often enough to start jobs
fast. kombu hands every transport option to ``create_engine``, so the polling interval
cannot be passed as an option; a subclass carries it instead.

Its channel is kombu's, made safe for several processes. The API, the worker and beat
each create the broker's tables and the queue's row the first time they use the queue,
and they start together. kombu guards the threads of one process with a lock, not
processes: the one that loses the race gets the database's refusal, "UNIQUE constraint
failed: kombu_queue.name" or "table kombu_queue already exists". A worker that gets it
while its consumer starts dies of it, since Celery calls it unrecoverable, and every job
then waits for a worker that is gone. The loser now reads what the winner made.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqlalchemy
from sqlalchemy import Boolean, DateTime, column, create_engine, delete, table
from sqlalchemy.exc import DatabaseError, IntegrityError

from service.settings import Settings

SQLA_PREFIX = "sqla+"
# Redis and SQS redeliver an unacknowledged message after this: it must outlast any task.
VISIBILITY_TIMEOUT = 3600
# The sqla transport's message table, as far as pruning needs it. kombu's model calls the
# column ``sent_at``, but it is named ``timestamp`` in the database.
_MESSAGES = table("kombu_message", column("visible", Boolean), column("timestamp", DateTime))


def connection_config(settings: Settings) -> dict[str, Any]:
    """Celery's settings for the broker connection, the queue and the message format."""
    broker_url = settings.broker_url
    transport_options: dict[str, object] = {}
    extra: dict[str, object] = {}
    if is_sqla(broker_url):
        # A bare SQLAlchemy URL plus an explicit transport class (see above).
        extra["broker_transport"] = polling_transport(settings.broker_poll_interval)
        broker_url = broker_url.removeprefix(SQLA_PREFIX)
    else:
        transport_options["visibility_timeout"] = VISIBILITY_TIMEOUT
    return {
        "broker_url": broker_url,
        "broker_transport_options": transport_options,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": settings.queue,
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        **extra,
    }


class SharedSqlaChannel(kombu_sqlalchemy.Channel):
    """kombu's channel, for a broker database that other processes create at the same
    time (see the module's docstring)."""

    def _open(self) -> Any:
        try:
            return super()._open()  # type: ignore[no-untyped-call]
        except DatabaseError:
            # Another process created the tables between kombu's check and its CREATE
            # (SQLite says so as an OperationalError, PostgreSQL as a ProgrammingError or
            # an IntegrityError of its catalog): they are there now, and kombu cached
            # nothing of the failed attempt, so the next one checks again.
            return super()._open()  # type: ignore[no-untyped-call]

    def _get_or_create(self, queue: str) -> Any:
        try:
            return super()._get_or_create(queue)  # type: ignore[no-untyped-call]
        except IntegrityError:
            # Another process inserted the queue's row between kombu's read and insert.
            self.session.rollback()
            found = self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).first()
            if found is None:
                raise
            return found


def polling_transport(interval: float) -> type[kombu_sqlalchemy.Transport]:
    return type(
        "PollingSqlaTransport",
        (kombu_sqlalchemy.Transport,),
        {"polling_interval": interval, "Channel": SharedSqlaChannel},
    )


def is_sqla(broker_url: str) -> bool:
    return broker_url.startswith(SQLA_PREFIX)


def prune_delivered(broker_url: str, older_than: timedelta) -> int:
    """Delete messages delivered over ``older_than`` ago: the sqla transport only marks
    them invisible, so without this the broker's database grows for ever."""
    engine = create_engine(broker_url.removeprefix(SQLA_PREFIX))
    # kombu stamps a message as it delivers it, in local time without a zone.
    cutoff = datetime.now() - older_than
    delivered = _MESSAGES.c.visible.is_(False) & (_MESSAGES.c.timestamp < cutoff)
    try:
        with engine.begin() as connection:
            result = connection.execute(delete(_MESSAGES).where(delivered))
            return int(getattr(result, "rowcount", 0) or 0)
    finally:
        engine.dispose()
