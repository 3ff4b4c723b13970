"""Triggers for the worker. Sent only after the transaction that justifies them commits.

A trigger that is lost (broker down, process killed between commit and send) costs at most
one sweep interval: the beat sweep re-drives every live job from the database.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from service.kit.db import after_commit
from service.settings import Settings

log = logging.getLogger(__name__)

RECONCILE_TASK = "runyard.reconcile_job"


def enqueue_reconcile(session: Session, settings: Settings, job_name: str) -> None:
    after_commit(session, lambda: send_reconcile(settings, job_name))


def send_reconcile(settings: Settings, job_name: str) -> None:
    from worker.celery_app import get_celery

    try:
        get_celery(settings).send_task(RECONCILE_TASK, args=[job_name], retry=False)
    except Exception:  # the sweep will pick the job up; a trigger must never fail a request
        log.warning(
            "could not enqueue %s for %s; the sweep will retry",
            RECONCILE_TASK,
            job_name,
            exc_info=True,
        )
