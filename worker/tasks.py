"""Celery tasks: thin, named, taking only a job name. Duplicates are expected and harmless."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Celery

from service.jobs import repository
from service.kit.db import session_scope
from service.kit.tasks import RECONCILE_TASK
from service.settings import Settings
from worker import broker
from worker.reconciler import Reconciler

log = logging.getLogger(__name__)


def register(app: Celery, settings: Settings) -> None:
    reconciler = Reconciler(settings)

    @app.task(name=RECONCILE_TASK, ignore_result=True)
    def reconcile_job(job_name: str) -> None:
        reconciler.reconcile(job_name)

    @app.task(name="runyard.sweep", ignore_result=True)
    def sweep() -> None:
        """Re-drive every live job, so no lost message or dead worker strands one."""
        with session_scope(settings.database_url) as session:
            names = repository.live_job_names(session)
        for name in names:
            # Redundant once the next sweep has sent its own.
            reconcile_job.apply_async([name], expires=settings.reconcile_interval * 5)

    @app.task(name="runyard.prune_broker", ignore_result=True)
    def prune_broker() -> None:
        if broker.is_sqla(settings.broker_url):
            removed = broker.prune_delivered(settings.broker_url, timedelta(hours=1))
            log.info("pruned %d delivered broker messages", removed)
