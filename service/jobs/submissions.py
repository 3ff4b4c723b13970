"""Jobs submitted to one API process at the same time are stored together.

A job's rows cost the same few statements whether one job is stored or twenty: the
forecast's lock and read of the capacity held, an INSERT per table and the commit. They
were two thirds of what a create cost the API. So while one request stores its job, the
creates that arrive meanwhile wait, and the next of them stores them all in one
transaction (group commit, as databases do with their log). A lone create waits for
nobody: it stores its job at once.

A batch that fails (a name in use, a spec the database refuses) is stored again job by
job, each in its own transaction, so only the job at fault gets the error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from service.jobs import service
from service.jobs.models import TrainingJob
from service.jobs.service import PreparedJob
from service.kit.db import session_scope
from service.settings import Settings

# Jobs stored in one transaction at most: enough that 8-16 clients at once share one,
# few enough that none waits long behind a batch.
BATCH = 32


@dataclass(eq=False)
class _Submission:
    prepared: PreparedJob
    project: str
    job: TrainingJob | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.job is not None or self.error is not None

    def outcome(self) -> TrainingJob:
        if self.error is not None:
            raise self.error
        assert self.job is not None
        return self.job


class Submissions:
    """The creates of one API process (one per app)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._changed = threading.Condition()
        self._waiting: list[_Submission] = []
        self._storing = False

    @property
    def waiting(self) -> int:
        """Jobs waiting for a batch to be stored in."""
        with self._changed:
            return len(self._waiting)

    def store(self, prepared: PreparedJob, project: str) -> TrainingJob:
        """Store the job, with whatever jobs were submitted meanwhile; returns once it is
        committed (and its trigger sent), or raises what storing it raised."""
        mine = _Submission(prepared, project)
        with self._changed:
            self._waiting.append(mine)
            while True:
                while self._storing and not mine.done:
                    self._changed.wait()
                if mine.done:
                    return mine.outcome()
                # Nobody stores now: this request stores the jobs waiting, its own among
                # them (or, behind a full batch, on a later round).
                self._storing = True
                batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
                self._changed.release()
                try:
                    self._store(batch)
                finally:
                    for each in batch:  # only if storing was cut short (BaseException)
                        if not each.done:
                            each.error = RuntimeError("storing the job was cut short")
                    self._changed.acquire()
                    self._storing = False
                    self._changed.notify_all()

    def _store(self, batch: list[_Submission]) -> None:
        try:
            with session_scope(self._settings.database_url) as session:
                jobs = service.store_new(
                    session, self._settings, [(each.prepared, each.project) for each in batch]
                )
        except Exception as exc:
            if len(batch) > 1:
                for each in batch:
                    self._store([each])
                return
            batch[0].error = exc
            return
        for each, job in zip(batch, jobs, strict=True):
            each.job = job
