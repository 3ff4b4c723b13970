"""Triggers for the worker, sent by task name only after the transaction that justifies
them commits, by a thread of their own: a request does not wait for the broker (with the
embedded SQLite broker, a send is a second database commit).

Triggers go out together: one message names every job whose trigger is waiting, up to
``BATCH_MOST``, after the first has waited ``LINGER_SECONDS`` for company. A message costs
the broker and the worker (its delivery, its acknowledgement) several times what driving a
waiting job costs, so under load a batch of jobs costs about what one did.

The API only sends: its Celery app knows the broker and the queue, and nothing of the
worker's tasks, which it names. A trigger that is lost (broker down, process killed between
commit and send) costs at most one sweep interval: the beat sweep re-drives the live jobs
from the database (those waiting for capacity less often, a batch at a time).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence

from celery import Celery
from sqlalchemy.orm import Session

from service.kit.broker import connection_config
from service.kit.db import after_commit
from service.settings import Settings

log = logging.getLogger(__name__)

# The worker's task that drives the jobs it names (worker.tasks registers it under this
# name), and the one-job task that servers sent before triggers were batched.
RECONCILE_TASK = "runyard.reconcile_jobs"
RECONCILE_ONE_TASK = "runyard.reconcile_job"
# The task that drives the tuning jobs it names (service.tuning.tasks, which the worker's
# process registers); the sweep sends it for every live tuning job too.
TUNE_TASK = "runyard.tune"
# The most job ids one message names, and how long the first waits for others: a few
# milliseconds against jobs that run for minutes.
BATCH_MOST = 16
LINGER_SECONDS = 0.02

# Per broker and queue: two installations may share a broker (their queues differ), and
# a test suite talks to many.
_senders: dict[tuple[str, str], Celery] = {}
_senders_lock = threading.Lock()


def enqueue_reconcile(session: Session, settings: Settings, job_id: str) -> None:
    after_commit(session, lambda: _post(settings, job_id))


def enqueue_tuning(session: Session, settings: Settings, tuning_job_id: str) -> None:
    """A pass of the tuner over the tuning job, once the transaction commits. Sent at
    once, not batched: a tuning job is created or stopped far more rarely than a job's
    instances report, and the sweep drives every live tuning job anyway."""
    after_commit(session, lambda: send_tuning(settings, [tuning_job_id]))


def send_tuning(
    settings: Settings, tuning_job_ids: Sequence[str], expires: float | None = None
) -> None:
    """``expires``: seconds after which the pass is worthless (the sweep's, once the next
    sweep has sent its own)."""
    _send(settings, TUNE_TASK, tuning_job_ids, expires)


# An outbox's thread ends after this long with nothing to send (a process may talk to many
# brokers over its life: a test suite does).
_IDLE_SECONDS = 30.0


class _Outbox:
    """Job ids to send, in order, by one daemon thread per broker and queue. One still
    here when the process ends is lost as any trigger may be: the sweep drives its job."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pending: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=self._send_forever, name="runyard-triggers", daemon=True).start()

    def _send_forever(self) -> None:
        while True:
            try:
                first = self.pending.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with _senders_lock:  # _post puts under it: nothing arrives while we go
                    if self.pending.empty():
                        del _outboxes[_destination(self.settings)]
                        return
                continue
            send_reconcile(self.settings, self._batch_after(first))

    def _batch_after(self, first: str) -> list[str]:
        """``first`` and the ids that come within the linger, each once, in order."""
        batch = [first]
        deadline = time.monotonic() + LINGER_SECONDS
        while len(batch) < BATCH_MOST:
            try:
                batch.append(self.pending.get(timeout=max(deadline - time.monotonic(), 0.0)))
            except queue.Empty:
                break
        return list(dict.fromkeys(batch))


_outboxes: dict[tuple[str, str], _Outbox] = {}


def _destination(settings: Settings) -> tuple[str, str]:
    return settings.broker_url, settings.queue


def _post(settings: Settings, job_id: str) -> None:
    with _senders_lock:
        outbox = _outboxes.get(_destination(settings))
        if outbox is None:
            outbox = _outboxes[_destination(settings)] = _Outbox(settings)
        outbox.pending.put(job_id)


def send_reconcile(settings: Settings, job_ids: Sequence[str]) -> None:
    _send(settings, RECONCILE_TASK, job_ids)


def _send(settings: Settings, task: str, ids: Sequence[str], expires: float | None = None) -> None:
    try:
        _sender(settings).send_task(
            task, args=[list(ids)], retry=False, headers=sent_now(), expires=expires
        )
    except Exception:  # the sweep drives them; a trigger must never fail a request
        log.warning(
            "could not enqueue %s for %s; the sweep will retry",
            task,
            ", ".join(ids),
            exc_info=True,
        )


# A trigger's header: when it was sent, for the worker to measure how long it waited
# (runyard_reconcile_lag_seconds).
SENT_AT_HEADER = "runyard_sent_at"


def sent_now() -> dict[str, float]:
    return {SENT_AT_HEADER: time.time()}


def load_sender(settings: Settings) -> None:
    """Build the sender and load its broker's client (for Redis, about fifty modules) now
    rather than at the first trigger, without connecting: for a process that loads what its
    requests need before it starts serving."""
    app = _sender(settings)
    # Celery builds these on first use: the producer's machinery, the (disabled) result
    # backend and the events a send announces itself with.
    app.amqp  # noqa: B018
    app.backend  # noqa: B018
    app.events  # noqa: B018
    connection = app.connection_for_write()
    try:
        connection.transport  # noqa: B018  (the transport class: the broker's client)
    finally:
        connection.release()


def _sender(settings: Settings) -> Celery:
    """A send-only app per broker and queue, built once per process (never at import)."""
    with _senders_lock:
        app = _senders.get(_destination(settings))
        if app is None:
            app = Celery("runyard-sender", set_as_current=False)
            app.conf.update(**connection_config(settings))
            _senders[_destination(settings)] = app
        return app
