"""The worker's Celery app, built in a factory from Settings (never at import)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from celery import Celery

from service.kit.broker import connection_config
from service.observability import pool
from service.settings import Settings
from worker.tasks import register

# The worker runs a thread pool (the local backend must reap the instances it starts, so
# they have to be children of one long-lived process), and Celery enforces no time limits
# on threads. Every wait in a reconcile pass is bounded by the reconciler itself instead:
# the longest is a teardown, teardown_grace plus KILL_WAIT_SECONDS.


# A registration of more tasks on the app: the composition root's (``runyard.server``),
# for tasks built on parts of the service the worker's own code does not import.
Registration = Callable[[Celery, Settings], None]


def create_celery(settings: Settings, more_tasks: Sequence[Registration] = ()) -> Celery:
    pool.watch_pools()
    app = Celery("runyard", set_as_current=False)
    app.conf.update(
        **connection_config(settings),
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        beat_schedule_filename=str(settings.home / "celerybeat-schedule"),
        beat_schedule={
            # A sweep left waiting (no worker running) is worthless once the next one is due.
            "sweep-live-jobs": {
                "task": "runyard.sweep",
                "schedule": settings.reconcile_interval,
                "options": {"expires": settings.reconcile_interval},
            },
            "reap-cluster-leftovers": {
                "task": "runyard.reap",
                "schedule": settings.reap_interval,
                "options": {"expires": settings.reap_interval},
            },
            "prune-broker": {"task": "runyard.prune_broker", "schedule": 600.0},
            # Retention is counted in days: an hour late changes nothing, so a missed
            # run is simply dropped (logs and uploaded sources alike).
            "prune-logs": {
                "task": "runyard.prune_logs",
                "schedule": 3600.0,
                "options": {"expires": 3600.0},
            },
            "prune-sources": {
                "task": "runyard.prune_sources",
                "schedule": 3600.0,
                "options": {"expires": 3600.0},
            },
        },
    )
    register(app, settings)
    for registration in more_tasks:
        registration(app, settings)
    return app
