"""Drives each job from what the database says toward what its backend reports.

Level-triggered and idempotent: a pass reads the job afresh, asks the backend what exists,
and takes one step. Running it twice, late, or after a crash is harmless, which is what
lets broker messages be mere triggers. Side effects (starting or ending processes) happen
outside any transaction; writes check the job's version so a concurrent stop from the API
is never overwritten.

Order of a job's life::

    InProgress/Starting -> [Pending: waiting for capacity] -> LaunchingInstances
        -> Downloading -> Training -> Uploading
        -> Completed | Failed            (the instances' reports decide)
    ... -> Restarting | Interrupted -> (tear down, back off) -> [Pending] -> Launching...
                                         (a retried failure, a spot interruption)
    Stopping/(Stopping|MaxRuntimeExceeded|MaxWaitTimeExceeded) -> Stopped

A pass reads the job's stage, which only ``service.jobs.lifecycle`` moves (its table is
printed in docs/job-lifecycle.md), and hands the job to that stage's handler, which decides
the events:

    Stopping    ending.drive_stop            the scripts' grace, then Stopped
    Restarting  restarts.continue_restart    tear down, back off, the next attempt
    Queued      starting.admit               take capacity, or wait in line
    Launching   starting.launch              the backend starts the instances
    Running     running.observe              the instances' reports decide
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from provisioning import registry
from provisioning.base import Backend, LaunchError, TeardownError
from service.capacity import service as capacity
from service.jobs import repository
from service.jobs.states import Stage
from service.kit.db import session_scope
from service.kit.enqueue import enqueue_reconcile
from service.observability.context import handling_job
from service.settings import Settings
from worker.reconciler import ending, restarts, running, starting
from worker.reconciler.passes import counting_pass
from worker.reconciler.snapshot import RETRIED, JobSnapshot, Pass, Superseded, load

log = logging.getLogger(__name__)

MAX_PASSES_PER_TASK = 20
# When a job lets go of its capacity, this many of the first jobs in line are woken: the
# first may be held back by its project's quota while the next ones fit.
WAKE_IN_LINE = 20
# A message names several jobs (service.kit.enqueue); they are driven side by side, this
# many at once, as they were when each had a message of its own: one slow launch (an EC2
# call) must not hold back the rest of its batch.
BATCH_THREADS = 4

HANDLERS: dict[Stage, Callable[[Pass, JobSnapshot], None]] = {
    Stage.STOPPING: ending.drive_stop,
    Stage.RESTARTING: restarts.continue_restart,
    Stage.QUEUED: starting.admit,
    Stage.LAUNCHING: starting.launch,
    Stage.RUNNING: running.observe,
}


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        build_backend: Callable[[str, Settings], Backend[Any]] = registry.build,
    ) -> None:
        self.settings = settings
        self.database_url = settings.database_url
        self.build_backend = build_backend
        # The lease must outlast the longest pass (a teardown waiting out its grace, then
        # the SIGKILL wait), or a second worker could take over mid-teardown.
        self.lease_seconds = max(settings.reconcile_lease_seconds, _longest_pass(settings))

    def reconcile_all(self, job_ids: Iterable[object]) -> None:
        """Drive each job named, side by side. One whose pass fails is logged and left to
        the sweep; the others go on."""
        if isinstance(job_ids, str):  # a message naming one job without its list
            job_ids = [job_ids]
        wanted = [job_id for job_id in dict.fromkeys(job_ids) if isinstance(job_id, str)]
        if len(wanted) == 1:  # no hand-off for the one job of a quiet moment
            self._reconcile_logged(wanted[0])
            return
        for done in [_batch_pool().submit(self._reconcile_logged, job_id) for job_id in wanted]:
            done.result()

    def _reconcile_logged(self, job_id: str) -> None:
        try:
            self.reconcile(job_id)
        except Exception:
            log.exception("reconciling job %s failed; the sweep drives it again", job_id)

    def reconcile(self, job_id: str) -> None:
        """Run passes over the job until nothing more is asked of it."""
        owner = uuid.uuid4().hex
        ttl = self.lease_seconds
        with session_scope(self.database_url) as session:
            # Taken, or the holder asked for another pass, which it will run itself.
            if not repository.take_lease(session, job_id, owner, ttl):
                return
        released = False
        try:
            for number in range(MAX_PASSES_PER_TASK):
                if number:  # the first pass's start came with the lease
                    with session_scope(self.database_url) as session:
                        if not repository.start_pass(session, job_id, owner, ttl):
                            return  # the lease lapsed and someone else took it
                try:
                    self.run_pass(job_id)
                except Superseded:
                    continue
                with session_scope(self.database_url) as session:
                    released = repository.release_lease(session, job_id, owner)
                if released:
                    return
        finally:
            if not released:
                with session_scope(self.database_url) as session:
                    repository.drop_lease(session, job_id, owner)

    def run_pass(self, job_id: str) -> None:
        snapshot = load(self.database_url, job_id)
        if snapshot is None:
            return
        with handling_job(snapshot.ref.name), counting_pass(snapshot.stage):
            try:
                self._drive(snapshot)
            finally:
                if snapshot.admitted_at is not None:
                    self._wake_line_if_freed(job_id)

    def _wake_line_if_freed(self, job_id: str) -> None:
        """The jobs waiting for capacity hear at once when this one let go of its own
        (ended, or torn down to restart), not at the next sweep."""
        with session_scope(self.database_url, readonly=True) as session:
            if repository.holds_capacity(session, job_id):
                return
            # Jobs being submitted as the capacity freed may have been found waiting: once
            # they commit they are in the line read here.
            capacity.wake_after_forecasts(session)
            for waiting in repository.first_in_line(session, WAKE_IN_LINE):
                enqueue_reconcile(session, self.settings, waiting)

    def _drive(self, snapshot: JobSnapshot) -> None:
        job_id = snapshot.ref.id
        step = Pass(self.settings, self.build_backend(snapshot.backend, self.settings))
        try:
            # While instances run, running.observe weighs max_wait after what they
            # reported (a job that completed in time is not stopped); here otherwise.
            if snapshot.stage not in (Stage.STOPPING, Stage.RUNNING) and ending.past_max_wait(
                snapshot
            ):
                snapshot = ending.stop_for_max_wait(step, snapshot)
            HANDLERS[snapshot.stage](step, snapshot)
        except RETRIED:
            raise
        except LaunchError as exc:
            # The provider's refusal (capacity, a quota) is the reason, not a fault of ours.
            log.warning("launching %s was refused: %s", snapshot.ref.name, exc)
            if exc.capacity and snapshot.spec.use_spot_instances:
                restarts.await_spot_capacity(step, job_id, exc)
            else:
                ending.fail(step, job_id, f"LaunchError: {exc}", teardown=True)
        except Exception as exc:
            # Anything else is a fault of the backend or of this code: retrying blindly
            # could launch paid instances forever, so the job fails, saying why.
            log.exception("reconciling %s failed; failing the job", snapshot.ref.name)
            # A teardown that already failed would only fail again; the reason names what
            # was left behind.
            ending.fail(
                step,
                job_id,
                f"InternalServerError: {type(exc).__name__}: {exc}",
                teardown=not isinstance(exc, TeardownError),
            )


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _batch_pool() -> ThreadPoolExecutor:
    """One for the process, made at first use: every Celery app a process builds (a test
    suite builds many) shares its threads."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="runyard-reconcile")
        return _pool


def _longest_pass(settings: Settings) -> float:
    """How long one pass may take, at most: a teardown that waits out every grace period
    of the slowest backend this server uses, then a margin."""
    return registry.teardown_budget(set(settings.backends.values()), settings) + 5.0
