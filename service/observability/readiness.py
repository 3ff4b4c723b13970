"""/readyz: whether this API process can do its work, telling a database that does not
answer from a broker that does not. (/healthz only says the process answers: a database
outage must take the API out of a load balancer, never get it restarted.)"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kombu.connection import Connection
from sqlalchemy import select

from service.kit.broker import connection_config
from service.kit.db import autocommit_reads
from service.settings import Settings

log = logging.getLogger(__name__)

# A probe gives up on a dependency after this long; Kubernetes' own timeout is longer.
TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    error: str | None = None


def check_database(settings: Settings) -> Check:
    try:
        with autocommit_reads(settings.database_url) as session:
            session.execute(select(1))
    except Exception as exc:
        return Check("database", False, _summary(exc))
    return Check("database", True)


def check_broker(settings: Settings) -> Check:
    config = connection_config(settings)
    connection = Connection(  # type: ignore[no-untyped-call]
        config["broker_url"],
        transport=config.get("broker_transport"),
        transport_options=config["broker_transport_options"],
        connect_timeout=TIMEOUT_SECONDS,
    )
    try:
        # One attempt: a retry loop would outlast the probe.
        connection.ensure_connection(  # type: ignore[no-untyped-call]
            max_retries=1, interval_start=0, interval_step=0, timeout=TIMEOUT_SECONDS
        )
    except Exception as exc:
        return Check("broker", False, _summary(exc))
    finally:
        connection.release()  # type: ignore[no-untyped-call]
    return Check("broker", True)


def _summary(exc: BaseException) -> str:
    """The error's kind only: /readyz answers without a token, and the error's text names
    hosts and ports (and the log has it whole)."""
    log.warning("readiness check failed", exc_info=exc)
    return type(exc).__name__
