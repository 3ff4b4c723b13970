"""The creates and stops of one API process, checked and stored by one thread of its own,
in batches.

A job's rows cost the same few statements whether one job is stored or twenty: the
forecast's lock and read of the capacity held, an INSERT per table and the commit. So the
creates that arrive while a batch is stored wait, and are stored together in the next one
(group commit, as databases do with their log); a lone create waits for nobody.

Clients that each send their next create once the last is answered come back together when
a batch is answered, but one by one: the thread, free again, took the first alone, and the
rest made the next batch. So after a batch of several the thread waits, at most
``LINGER_SECONDS``, for as many creates as that batch held. With two API processes and 8
clients (PostgreSQL, 2 cores) that took creates from 360-470 a second to 480-590, at 2.2-2.6
ms of the API's CPU each instead of 2.5-3.3.

One thread checks (``preparation.prepare``) and stores them all, and a create's request waits
for it without a thread of its own. With a thread per request, eight requests at once took
turns at the interpreter's lock at every file check, query and hand-off: a create cost the
API 2.8-3.0 ms of CPU, and 2.1-2.4 ms this way (one API process, PostgreSQL, 8 clients). A
spec whose checks reach remote storage (an s3:// source, channel or output) is checked in
the thread pool first, so one slow bucket does not hold up every other create behind it.

A batch that fails (a name in use, a spec the database refuses) is stored again job by
job, each in its own transaction, so only the job at fault gets the error.

Stops come this way too, for the same reason: a stop's own statements are a job's read
(locked), its transitions and the job's row, and its log line where it never launched, but
each stop alone also paid for a transaction, its round trips and the ORM's flush. Those
asked together are read in one statement and written in one flush and one commit
(``service.stop_many``); a batch that fails (a job changed meanwhile) is stopped again stop
by stop. With 8 clients stopping 1,600 jobs (PostgreSQL, 2 cores) a stop cost the API
2.3-2.9 ms of CPU instead of 4.1-4.3.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.auth.access import Principal
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobCreate
from service.kit.db import session_scope
from service.kit.errors import refuse
from service.settings import Settings
from service.training import preparation, service
from service.training.batch_reads import PreparationReads, preparation_reads
from service.training.preparation import PreparedJob

# Jobs stored in one transaction at most: enough that 8-16 clients at once share one,
# few enough that none waits long behind a batch.
BATCH = 32
# How long the thread waits, after a batch of several, for as many creates as it held
# (they come back once their batch is answered): well under a create's own time. In the
# bench, 4 ms made more creations a second than 2 ms, and as many as 8 ms.
LINGER_SECONDS = 0.004
# The submitting thread ends after this long with nothing to do; the next create starts
# another (a test suite builds many apps, each with its own).
IDLE_SECONDS = 5.0


@dataclass(eq=False)
class _Submission:
    spec: JobCreate
    project: str
    # What its request awaits, on its own event loop.
    outcome: asyncio.Future[TrainingJob]
    # Checked already (in the thread pool), or to be checked by the submitting thread.
    prepared: PreparedJob | None = None
    job: TrainingJob | None = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Stop:
    name: str
    user: Principal
    project: str | None
    # The reply, made from the stopped job inside its transaction (where whatever it
    # shows of the job can still be read).
    reply: Callable[[TrainingJob], str]
    outcome: asyncio.Future[str]
    answer: str | None = None  # the reply, once the stop is committed
    error: BaseException | None = None
    # The request's, taken where it asked (in its task): what this thread logs of the
    # stop names the request and the job, as it would in the request's own thread.
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


class Submissions:
    """The creates and stops of one API process (one per app)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._changed = threading.Condition()
        self._waiting: list[_Submission | _Stop] = []
        self._thread: threading.Thread | None = None
        self._last_batch = 0  # how many creates and stops the last batch held

    @property
    def waiting(self) -> int:
        """Creates and stops waiting for a batch to be stored in."""
        with self._changed:
            return len(self._waiting)

    async def submit(self, spec: JobCreate, project: str) -> TrainingJob:
        """Check the job and store it, with whatever jobs were submitted meanwhile; returns
        once it is committed (and its trigger sent), or raises what refused it."""
        prepared = None
        if preparation.checks_reach_network(self._settings, spec):
            prepared = await run_in_threadpool(preparation.prepare, self._settings, spec, project)
        mine = _Submission(spec, project, asyncio.get_running_loop().create_future(), prepared)
        self._put(mine)
        # A request cancelled here (its client went away) leaves its job to be stored,
        # as a create whose reply was lost on the way would be.
        return await mine.outcome

    async def stop(
        self,
        name: str,
        user: Principal,
        project: str | None,
        reply: Callable[[TrainingJob], str],
    ) -> str:
        """Stop the job, with whatever stops were asked meanwhile; returns ``reply`` of the
        stopped job once the stop is committed, or raises what refused it."""
        mine = _Stop(name, user, project, reply, asyncio.get_running_loop().create_future())
        self._put(mine)
        return await mine.outcome

    def _put(self, mine: _Submission | _Stop) -> None:
        """In line for the next batch; the thread is started if none runs."""
        with self._changed:
            self._waiting.append(mine)
            if self._thread is None:
                self._start()
            self._changed.notify()

    def _run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                try:
                    creates = [each for each in batch if isinstance(each, _Submission)]
                    if creates:
                        self._prepare_and_store(creates)
                    stops = [each for each in batch if isinstance(each, _Stop)]
                    if stops:
                        self._stop(stops)
                finally:
                    _answer(batch)
        finally:
            with self._changed:
                # Ended by something raised, not for want of work: those left get a thread.
                if self._thread is threading.current_thread():
                    self._thread = None
                    if self._waiting:
                        self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="runyard-submissions", daemon=True)
        self._thread.start()

    def _next_batch(self) -> list[_Submission | _Stop] | None:
        """The next jobs to store, or None once nothing came for IDLE_SECONDS (the thread
        then ends: a submit after that starts another). After a batch of several, as many
        as it held, or what came within LINGER_SECONDS."""
        with self._changed:
            while not self._waiting:
                if not self._changed.wait(IDLE_SECONDS) and not self._waiting:
                    self._thread = None
                    return None
            if self._last_batch > 1:
                deadline = time.monotonic() + LINGER_SECONDS
                while len(self._waiting) < self._last_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(left)
            batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
            self._last_batch = len(batch)
            return batch

    def _prepare_and_store(self, batch: list[_Submission]) -> None:
        ready = []
        with preparation_reads(self._settings) as reads:
            for each in batch:
                try:
                    prepared = each.prepared or preparation.prepare(
                        self._settings,
                        each.spec,
                        each.project,
                        reads=reads,
                        places_checked_later=True,
                    )
                except Exception as exc:  # refused: its request answers with it
                    each.error = exc
                    continue
                ready.append((each, prepared))
        if ready:
            self._store(ready)

    def _store(self, batch: list[tuple[_Submission, PreparedJob]]) -> None:
        """Store the batch in one transaction, which first refuses the jobs that would
        write where another project's jobs write (``preparation.places_taken``, for the
        batch at once): one session a batch, not one to read and one to store."""
        try:
            with session_scope(self._settings.database_url) as session:
                self._check_places(batch, session)
                kept = [(each, prepared) for each, prepared in batch if each.error is None]
                if not kept:
                    return
                jobs = service.store_new(
                    session, self._settings, [(prepared, each.project) for each, prepared in kept]
                )
        except Exception as exc:
            if len(batch) > 1:
                for one in batch:
                    if one[0].error is None:
                        self._store([one])
                return
            batch[0][0].error = exc
            return
        for (each, _prepared), job in zip(kept, jobs, strict=True):
            each.job = job

    def _stop(self, stops: list[_Stop]) -> None:
        """Stop the batch's jobs in one transaction; should it fail (a job that changed
        meanwhile, say), each again in one of its own, so only a stop at fault fails."""
        if len(stops) == 1:
            stops[0].context.run(self._stop_one, stops[0])
            return
        try:
            with session_scope(self._settings.database_url) as session:
                wanted = [(each.name, each.user, each.project) for each in stops]
                for each, job in zip(
                    stops, service.stop_many(session, self._settings, wanted), strict=True
                ):
                    if isinstance(job, TrainingJob):
                        each.answer = each.reply(job)
                    else:
                        each.error = job
        except Exception:
            for each in stops:
                each.answer = each.error = None  # nothing of the batch was stored
                each.context.run(self._stop_one, each)
            return
        for each in stops:
            if each.answer is not None:
                each.context.run(service.note_stop, each.user)

    def _stop_one(self, each: _Stop) -> None:
        try:
            with session_scope(self._settings.database_url) as session:
                job = service.stop(session, self._settings, each.name, each.user, each.project)
                each.answer = each.reply(job)
        except Exception as exc:
            each.answer = None
            each.error = exc

    def _check_places(self, batch: list[tuple[_Submission, PreparedJob]], session: Session) -> None:
        """Refuse the jobs that would write where another project's jobs write; those
        checked already (in the thread pool) are not read again."""
        unchecked = [(each, prepared) for each, prepared in batch if each.prepared is None]
        if not unchecked:
            return
        jobs = [
            (prepared.name, prepared.spec, prepared.written, each.project)
            for each, prepared in unchecked
        ]
        reads = PreparationReads(session, self._settings)
        for (each, _), problems in zip(
            unchecked, preparation.places_taken(jobs, reads), strict=True
        ):
            try:
                refuse(problems)
            except Exception as exc:
                each.error = exc


def _answer(batch: list[_Submission | _Stop]) -> None:
    """Hand each request its job or its error: one wake of each event loop a batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Submission | _Stop]] = {}
    for each in batch:
        result = each.answer if isinstance(each, _Stop) else each.job
        if result is None and each.error is None:  # storing was cut short
            each.error = RuntimeError("storing the job's change was cut short")
        by_loop.setdefault(each.outcome.get_loop(), []).append(each)
    for loop, answered in by_loop.items():
        # A loop that has closed has nobody waiting on it any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, answered)


def _settle(answered: list[_Submission | _Stop]) -> None:
    for each in answered:
        if each.outcome.done():  # its request was cancelled
            continue
        if each.error is not None:
            each.outcome.set_exception(each.error)
        elif isinstance(each, _Stop):
            if each.answer is not None:
                each.outcome.set_result(each.answer)
        elif each.job is not None:
            each.outcome.set_result(each.job)
