"""Who hears that a job has ended, though the jobs domain knows nothing of them.

A domain built on jobs registers a listener where its process is composed: a tuning job
hears that one of its trials ended, and its tuner asks for the next trial at once rather
than at the next sweep. ``lifecycle`` calls the listeners of the job's database as the job
reaches Completed, Failed or Stopped, inside the transaction that records it, whichever
process ends it (the worker's reconciler, or the API stopping a job still in line).

A listener reads (the job's own changes unflushed: its caller flushes them) and schedules
what follows the commit (``service.kit.db.after_commit``); it writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy.orm import Session, object_session

from service.jobs.models import TrainingJob
from service.kit.db import database_url_of

JobEnded = Callable[[Session, TrainingJob], None]

# By database URL (one installation; a test suite builds many), then by the listener's
# name.
_listeners: dict[str, dict[str, JobEnded]] = {}
_lock = threading.Lock()


def listen(database_url: str, name: str, listener: JobEnded) -> None:
    """Call ``listener`` with each job of that database that ends. A listener of a name
    already registered replaces it (an app built again for the same database)."""
    with _lock:
        _listeners.setdefault(database_url, {})[name] = listener


def announce(job: TrainingJob) -> None:
    """Tell the listeners of the job's database that it has ended (a job that is not
    being written in a session of ``service.kit.db`` has no one to tell)."""
    session = object_session(job)
    url = database_url_of(session) if session is not None else None
    if session is None or url is None:
        return
    with _lock:
        listeners = list(_listeners.get(url, {}).values())
    with session.no_autoflush:
        for listener in listeners:
            listener(session, job)
