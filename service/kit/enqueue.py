"""Triggers for the worker, sent by task name only after the transaction that justifies
them commits, by a thread of their own: a request does not wait for the broker (with the
embedded SQLite broker, a send is a second database commit).

The API only sends: its Celery app knows the broker and the queue, and nothing of the
worker's tasks, which it names. A trigger that is lost (broker down, process killed between
commit and send) costs at most one sweep interval: the beat sweep re-drives the live jobs
from the database (those waiting for capacity less often, a batch at a time).
"""

from __future__ import annotations

import logging
import queue
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
    after_commit(session, lambda: _post(settings, job_id))


# An outbox's thread ends after this long with nothing to send (a process may talk to many
# brokers over its life: a test suite does).
_IDLE_SECONDS = 30.0


class _Outbox:
    """Job ids to send, in order, by one daemon thread per broker. One still here when the
    process ends is lost as any trigger may be: the sweep drives its job."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pending: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=self._send_forever, name="runyard-triggers", daemon=True).start()

    def _send_forever(self) -> None:
        while True:
            try:
                job_id = self.pending.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with _senders_lock:  # _post puts under it: nothing arrives while we go
                    if self.pending.empty():
                        del _outboxes[self.settings.broker_url]
                        return
                continue
            send_reconcile(self.settings, job_id)


_outboxes: dict[str, _Outbox] = {}


def _post(settings: Settings, job_id: str) -> None:
    with _senders_lock:
        outbox = _outboxes.get(settings.broker_url)
        if outbox is None:
            outbox = _outboxes[settings.broker_url] = _Outbox(settings)
        outbox.pending.put(job_id)


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
