"""The embedded broker: kombu's SQLAlchemy transport, polled often enough to start jobs fast.

kombu hands every transport option to ``create_engine``, so the polling interval cannot be
passed as an option; a subclass carries it instead.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kombu.transport import sqlalchemy as kombu_sqlalchemy
from sqlalchemy import create_engine, text

SQLA_PREFIX = "sqla+"


def polling_transport(interval: float) -> type[kombu_sqlalchemy.Transport]:
    return type(
        "PollingSqlaTransport", (kombu_sqlalchemy.Transport,), {"polling_interval": interval}
    )


def is_sqla(broker_url: str) -> bool:
    return broker_url.startswith(SQLA_PREFIX)


def prune_delivered(broker_url: str, older_than: timedelta) -> int:
    """Delete delivered messages: the sqla transport only marks them invisible."""
    engine = create_engine(broker_url.removeprefix(SQLA_PREFIX))
    cutoff = datetime.now(UTC).replace(tzinfo=None) - older_than
    try:
        with engine.begin() as connection:
            result = connection.execute(
                text("DELETE FROM kombu_message WHERE visible = :no AND sent_at < :cutoff"),
                {"no": False, "cutoff": cutoff},
            )
            return int(getattr(result, "rowcount", 0) or 0)
    finally:
        engine.dispose()
