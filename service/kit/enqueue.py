"""Triggers for the worker, sent by task name only after the transaction that justifies
them commits.

The API only sends: its Celery app knows the broker and the queue, and nothing of the
worker's tasks, which it names. A trigger that is lost (broker down, process killed between
commit and send) costs at most one sweep interval: the beat sweep re-drives the live jobs
from the database (those waiting for capacity less often, a batch at a time).
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from sqlalchemy.orm import Session

from service.kit.broker import connection_config
from service.kit.db import after_commit
from service.settings import Settings

log = logging.getLogger(__name__)

# The worker's task that drives one job (worker.tasks registers it under this name).
RECONCILE_TASK = "runyard.reconcile_job"

_senders: dict[str, Celery] = {}
_senders_lock = threading.Lock()


def enqueue_reconcile(session: Session, settings: Settings, job_id: str) -> None:
    after_commit(session, lambda: send_reconcile(settings, job_id))


def send_reconcile(settings: Settings, job_id: str) -> None:
    try:
        _sender(settings).send_task(RECONCILE_TASK, args=[job_id], retry=False)
    except Exception:  # the sweep will pick the job up; a trigger must never fail a request
        log.warning(
            "could not enqueue %s for %s; the sweep will retry",
            RECONCILE_TASK,
            job_id,
            exc_info=True,
        )


def _sender(settings: Settings) -> Celery:
    """A send-only app per broker URL, built once per process (never at import)."""
    with _senders_lock:
        app = _senders.get(settings.broker_url)
        if app is None:
            app = Celery("runyard-sender", set_as_current=False)
            app.conf.update(**connection_config(settings))
            _senders[settings.broker_url] = app
        return app
