"""The Celery app, built in a factory from Settings (never at import)."""

from __future__ import annotations

import threading

from celery import Celery

from service.settings import Settings
from worker import broker

# The worker runs a thread pool (the local backend must reap the instances it starts, so
# they have to be children of one long-lived process), and Celery enforces no time limits
# on threads. Every wait in a reconcile pass is bounded by the reconciler itself instead:
# the longest is a teardown, teardown_grace plus KILL_WAIT_SECONDS.

_apps: dict[str, Celery] = {}
_apps_lock = threading.Lock()


def create_celery(settings: Settings) -> Celery:
    app = Celery("runyard", set_as_current=False)
    broker_url = settings.broker_url
    transport_options: dict[str, object] = {}
    extra: dict[str, object] = {}
    if broker.is_sqla(broker_url):
        # A bare SQLAlchemy URL plus an explicit transport class: see worker.broker.
        extra["broker_transport"] = broker.polling_transport(settings.broker_poll_interval)
        broker_url = broker_url.removeprefix(broker.SQLA_PREFIX)
    else:
        # Redis/SQS redeliver unacked messages after this; it must outlast any task.
        transport_options["visibility_timeout"] = 3600
    app.conf.update(
        broker_url=broker_url,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.queue,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
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
            # run is simply dropped.
            "prune-logs": {
                "task": "runyard.prune_logs",
                "schedule": 3600.0,
                "options": {"expires": 3600.0},
            },
        },
        **extra,
    )
    from worker.tasks import register

    register(app, settings)
    return app


def get_celery(settings: Settings) -> Celery:
    """The app this process sends with, one per broker URL."""
    with _apps_lock:
        app = _apps.get(settings.broker_url)
        if app is None:
            app = _apps[settings.broker_url] = create_celery(settings)
        return app
