"""A trial's end wakes its tuner at once: the tuner takes in the trial's result and asks
for the next trial, rather than waiting for the sweep's pass over every live tuning job.

The jobs domain knows nothing of tuning: the processes that end jobs (the API, the worker)
register ``trial_ended`` as a listener of their database's job ends (``listen``), and the
tuner's pass is sent once the transaction that ended the trial commits. A pass lost on the
way costs what it did before: the sweep's.
"""

from __future__ import annotations

import functools

from sqlalchemy.orm import Session

from service.jobs import endings
from service.jobs.models import TrainingJob
from service.kit.enqueue import enqueue_tuning
from service.settings import Settings
from service.tuning import repository
from service.tuning.trials import TRIAL_NAME_END

LISTENER = "tuning"


def listen(settings: Settings) -> None:
    """Wake a tuner whenever one of its trials ends in this settings' database."""
    endings.listen(settings.database_url, LISTENER, functools.partial(trial_ended, settings))


def trial_ended(settings: Settings, session: Session, job: TrainingJob) -> None:
    if not TRIAL_NAME_END.search(job.name):
        return  # no trial: spares the ends of other jobs a query
    tuning_job_id = repository.tuning_job_of(session, job.id)
    if tuning_job_id is not None:
        enqueue_tuning(session, settings, tuning_job_id)
