"""Celery tasks: thin, named, taking only a job name. Duplicates are expected and harmless."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from celery import Celery, Task

from provisioning import registry
from provisioning.base import Backend, JobRef
from service.jobs import repository
from service.kit import broker
from service.kit.db import session_scope
from service.kit.enqueue import (
    BATCH_MOST,
    RECONCILE_ONE_TASK,
    RECONCILE_TASK,
    SENT_AT_HEADER,
    send_tuning,
    sent_now,
)
from service.metrics import retention
from service.observability import instruments
from service.settings import Settings
from service.sources import retention as source_retention
from service.tuning import repository as tuning_repository
from worker.reconciler import Reconciler

log = logging.getLogger(__name__)

# Of the jobs waiting for capacity, one sweep re-drives at most the first this many in
# line, and this many spot jobs (whose max_wait runs while they wait).
SWEEP_HEADS_OF_LINE = 20
SWEEP_WAITING_SPOT = 50


def register(app: Celery, settings: Settings) -> None:
    reconciler = Reconciler(settings)

    @app.task(name=RECONCILE_TASK, ignore_result=True, bind=True)
    def reconcile_jobs(self: Task[Any, Any], job_ids: list[str]) -> None:
        observe_lag(getattr(self.request, SENT_AT_HEADER, None))
        reconciler.reconcile_all(job_ids)

    # Sent by a server from before triggers were batched (a message queued across an
    # upgrade, a replica not yet upgraded).
    @app.task(name=RECONCILE_ONE_TASK, ignore_result=True)
    def reconcile_job(job_id: str) -> None:
        reconciler.reconcile_all([job_id])

    @app.task(name="runyard.sweep", ignore_result=True)
    def sweep() -> None:
        """Re-drive every live job that can change, and of those waiting in line the
        next to be admitted, so no lost message or dead worker strands one."""
        with session_scope(settings.database_url) as session:
            job_ids = repository.sweep_job_ids(
                session,
                running_every=settings.running_sweep_seconds,
                waiting_every=settings.waiting_sweep_seconds,
                heads=SWEEP_HEADS_OF_LINE,
                batch=SWEEP_WAITING_SPOT,
            )
            tuning_job_ids = tuning_repository.live_ids(session)
        # Each live tuning job's tuner takes in its trials' ends and asks for more.
        for start in range(0, len(tuning_job_ids), BATCH_MOST):
            send_tuning(
                settings,
                tuning_job_ids[start : start + BATCH_MOST],
                expires=settings.reconcile_interval * 5,
            )
        for start in range(0, len(job_ids), BATCH_MOST):
            # Redundant once the next sweep has sent its own.
            reconcile_jobs.apply_async(
                [job_ids[start : start + BATCH_MOST]],
                expires=settings.reconcile_interval * 5,
                headers=sent_now(),
            )

    @app.task(name="runyard.reap", ignore_result=True, shared=False)
    def reap() -> None:
        """Remove what a cluster still holds for jobs that have ended: left by a worker that
        died between ending a job and its teardown, or by someone re-creating objects.
        Jobs this server does not know are left alone: they may be another server's."""
        for name in sorted(set(settings.backends.values())):
            try:
                reap_backend(registry.build(name, settings), settings)
            except Exception:
                log.exception("reaping the %s backend failed; the next round tries again", name)

    # Not shared: a shared task is handed to every Celery app this process builds later,
    # closing over this app's settings (and database).
    @app.task(name="runyard.prune_logs", ignore_result=True, shared=False)
    def prune_logs() -> None:
        """Delete the log lines and metric points of jobs that ended before the retention
        period (RUNYARD_LOG_RETENTION_DAYS); live jobs keep theirs."""
        if settings.log_retention_days == 0:
            return
        pruned = retention.prune_ended_jobs(settings.database_url, settings.log_retention_days)
        if pruned.log_lines or pruned.metric_points:
            log.info(
                "deleted %d log lines and %d metric points of jobs ended over %d days ago",
                pruned.log_lines,
                pruned.metric_points,
                settings.log_retention_days,
            )

    @app.task(name="runyard.prune_sources", ignore_result=True, shared=False)
    def prune_sources() -> None:
        """Delete uploaded code that no job refers to, once it is older than the
        retention period (RUNYARD_SOURCE_RETENTION_DAYS)."""
        with session_scope(settings.database_url, readonly=True) as session:
            removed = source_retention.prune_unreferenced(session, settings)
        if removed:
            log.info(
                "deleted %d uploaded sources no job refers to, last uploaded over %d days ago",
                len(removed),
                settings.source_retention_days,
            )

    @app.task(name="runyard.prune_broker", ignore_result=True)
    def prune_broker() -> None:
        if broker.is_sqla(settings.broker_url):
            removed = broker.prune_delivered(settings.broker_url, timedelta(hours=1))
            log.info("pruned %d delivered broker messages", removed)


def observe_lag(sent_at: object) -> None:
    """Record how long a trigger waited, if it says when it was sent (one from an older
    server does not). Clocks of two machines may differ: a negative wait counts as none."""
    if isinstance(sent_at, int | float):
        instruments.RECONCILE_LAG.observe(max(0.0, time.time() - sent_at))


def reap_backend(backend: Backend[Any], settings: Settings) -> list[JobRef]:
    held = backend.held_jobs()
    if not held:
        return []
    with session_scope(settings.database_url, readonly=True) as session:
        ended = repository.ended_job_ids(session, [ref.id for ref in held])
    reaped = [ref for ref in held if ref.id in ended]
    for ref in reaped:
        log.warning("%s still held %s after it ended; removing it", backend.name, ref.name)
        backend.teardown(ref)
    return reaped
