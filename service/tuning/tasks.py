"""The tuner's Celery task, which the worker's process registers (``runyard.server``): it
submits trials through the training service, which the worker's own code never imports.
Registering it also makes the worker wake a tuner as one of its trials ends
(``service.tuning.wake``)."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy.exc import SQLAlchemyError

from service.kit.enqueue import TUNE_TASK
from service.settings import Settings
from service.tuning import tuner, wake

log = logging.getLogger(__name__)


def register(app: Celery, settings: Settings) -> None:
    # The worker's reconciler ends most trials (Completed, Failed, Stopped after grace).
    wake.listen(settings)

    # Not shared: a shared task is handed to every Celery app this process builds later,
    # closing over this app's settings (and database).
    @app.task(name=TUNE_TASK, ignore_result=True, shared=False)
    def tune(tuning_job_ids: list[str]) -> None:
        """A pass over each tuning job named; duplicates are harmless."""
        for tuning_job_id in tuning_job_ids:
            try:
                tuner.advance(settings, tuning_job_id)
            except SQLAlchemyError:
                # The database is away for now: the sweep sends the next pass.
                log.warning("a pass over tuning job %s failed", tuning_job_id, exc_info=True)
