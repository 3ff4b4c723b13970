"""Stopping, finishing and billing: how a job ends, whatever ends it.

A stop (by a person, max_run or max_wait) gives the scripts their grace, then ends the job
Stopped with the secondary status that names why, and says why in the job's log as well:
the instances only know that they were told to stop. Finishing keeps the consoles of
instances that never shipped a line, records the result and bills the attempt, and then
tears every instance down: the job reads as ended as soon as its result is decided, not
once its files are gone (a job's layer of installed packages, its namespaces, an EC2
instance's shutdown). The teardown is still certain: a worker that dies before it ends
leaves the job's instances to the reaper (``worker.tasks``), which removes whatever an
ended job still holds. The attempt is billed up to its result (``billing``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import object_session

from contract.failures import fit
from contract.limits import MAX_LINE
from provisioning.base import InstanceState
from service.jobs import lifecycle
from service.jobs.billing import spot_savings_percent, training_seconds
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.jobs.states import STOPPED_BY_USER
from service.kit.db import session_scope, to_micros, utcnow
from service.kit.text import without_nul
from service.logs import repository as log_repository
from service.logs import service as logs
from service.logs.schemas import Line
from service.metrics import extraction
from worker.reconciler import phases
from worker.reconciler.billing import attempt_worked, bill_attempt, spot_price_ratio
from worker.reconciler.snapshot import JobSnapshot, Pass, Report, Superseded

log = logging.getLogger(__name__)

MAX_CONSOLE_LINES = 5000


def past_max_wait(snapshot: JobSnapshot) -> bool:
    budget = snapshot.spec.max_wait
    return (
        snapshot.spec.use_spot_instances
        and budget is not None
        and utcnow() - snapshot.created_at > timedelta(seconds=budget)
    )


def stop_for_max_wait(step: Pass, snapshot: JobSnapshot) -> JobSnapshot:
    return stop_for(
        step,
        snapshot,
        Event.MAX_WAIT_EXCEEDED,
        f"Stopping: the job took longer than max_wait ({snapshot.spec.max_wait} s), "
        "waiting for spot capacity included",
    )


def stop_for(step: Pass, snapshot: JobSnapshot, reason: Event, message: str) -> JobSnapshot:
    def stopping(job: TrainingJob) -> None:
        lifecycle.apply(job, reason, message)

    return step.update(snapshot, stopping)


def drive_stop(step: Pass, snapshot: JobSnapshot) -> None:
    backend = step.backend
    if snapshot.stop_signalled_at is None:
        backend.cancel(snapshot.ref, force=False)
        now = utcnow()

        def signalled(job: TrainingJob) -> None:
            job.stop_signalled_at = now

        snapshot = step.update(snapshot, signalled)
    signalled_at = snapshot.stop_signalled_at or utcnow()
    statuses = backend.describe(snapshot.ref) or {}
    running = any(s.state == InstanceState.RUNNING for s in statuses.values())
    grace = timedelta(seconds=step.settings.stop_grace_seconds)
    if running and utcnow() - signalled_at < grace:
        return  # give the scripts their grace period; the sweep comes back
    reports = step.reports(snapshot)
    ended = lifecycle.end_of_stop(snapshot.stop_reason)
    finish(step, snapshot, reports, ended, None, why=_why_stopped(snapshot, ended))


def _why_stopped(snapshot: JobSnapshot, ended: Event) -> str:
    spec = snapshot.spec
    return {
        Event.STOPPED_AT_MAX_RUNTIME: (
            f"Training job stopped: its max_run of {spec.max_run} s was reached"
        ),
        Event.STOPPED_AT_MAX_WAIT: (
            f"Training job stopped: its max_wait of {spec.max_wait} s was reached, "
            "waiting for spot capacity included"
        ),
    }.get(ended, STOPPED_BY_USER)


def fail(step: Pass, job_id: str, reason: str, *, teardown: bool) -> None:
    """Fail the job as it is now (the step that failed may have moved it on)."""
    current = step.load(job_id)
    if current is not None:
        reports = step.reports(current)
        finish(step, current, reports, Event.FAILED, reason, teardown=teardown)


def finish(
    step: Pass,
    snapshot: JobSnapshot,
    reports: dict[str, Report],
    ending: Event,
    failure_reason: str | None,
    *,
    teardown: bool = True,
    why: str | None = None,
) -> None:
    """End the job by ``ending`` (completed, failed or a stop's end); ``why``, if given,
    becomes the last line of its log."""
    if failure_reason is not None:
        failure_reason = fit(without_nul(failure_reason))
    # The attempt ends with its result, not with the teardown that follows: the instances
    # are not billed for the time it takes them to go (minutes for an EC2 instance).
    decided_at = utcnow()
    worked = attempt_worked(snapshot.hosts, reports, decided_at)
    ended_at = worked.end if worked is not None else decided_at
    price_ratio = spot_price_ratio(snapshot, step.settings.spot_price_ratio)
    # Before the result: once the job reads as ended, its log is closed.
    if teardown:
        keep_consoles(step, snapshot)
    # Its final metrics whole: lines an API process stored but did not search (it died).
    unsearched = _search_the_rest(step, snapshot)
    now = utcnow()
    master = reports.get(snapshot.hosts[0])
    # The reason's first line says what failed; a traceback's frames below it are the
    # failure reason's to show.
    summary = (failure_reason or "").partition("\n")[0][:200]
    message = {
        Event.COMPLETED: "Training job completed",
        Event.FAILED: f"Training job failed: {summary}",
    }.get(ending, "Training job stopped")

    def finished(job: TrainingJob) -> None:
        # Each phase its instances went through, however briefly, before its end.
        phases.record(job, reports)
        lifecycle.apply(job, ending, message, now)
        for host, reason in unsearched.items():
            _log_last_line(job, host, reason, now)
        if why is not None:
            _log_last_line(job, snapshot.hosts[0], why, now)
        job.failure_reason = failure_reason
        job.model_artifacts = master.model_uri if master else None
        job.ended_at = now
        bill_attempt(job, worked, ended_at, price_ratio)
        if job.training_start_time is not None:
            job.training_end_time = ended_at
            if price_ratio is not None and job.billable_seconds is not None:
                training = training_seconds(job.training_start_time, ended_at)
                job.spot_savings_percent = spot_savings_percent(job.billable_seconds, training)
        job.restart_cause = None

    step.update(snapshot, finished)
    if teardown:
        tear_down(step, snapshot)


def tear_down(step: Pass, snapshot: JobSnapshot) -> None:
    """Remove an ended job's instances. One that cannot be removed now changes nothing of
    the job's result: the reaper tries again at its next round."""
    try:
        step.backend.teardown(snapshot.ref)
    except Exception:
        log.exception(
            "removing the instances of %s, which has ended, failed; the reaper tries again",
            snapshot.ref.name,
        )


def _search_the_rest(step: Pass, snapshot: JobSnapshot) -> dict[str, str]:
    """Search each host's lines not searched for metrics yet; the hosts whose lines were
    left unsearched (over the search's budget), and why."""
    # Best effort, as keeping the consoles is: the job ends even where this fails.
    url = step.settings.database_url
    try:
        for host in snapshot.hosts:
            extraction.extract_pending(url, snapshot.ref.id, host)
        with session_scope(url, readonly=True) as session:
            return extraction.stopped_hosts(session, snapshot.ref.id)
    except (Superseded, OperationalError):
        raise  # the database is away for now: the next pass searches them
    except Exception:
        log.exception("searching the last lines of %s for metrics failed", snapshot.ref.name)
        return {}


def _log_last_line(job: TrainingJob, host: str, message: str, at: datetime) -> None:
    session = object_session(job)
    if session is None:
        return  # not a job being written: nothing to store the line with
    log_repository.append_service_line(session, job.id, host, message, at)


def keep_consoles(step: Pass, snapshot: JobSnapshot) -> None:
    """Store what an instance printed, if it never shipped a line itself (a runtime that
    could not reach the service): once the instance is removed, it is gone."""
    # Best effort: what cannot be kept must never keep the instances from going.
    try:
        consoles = step.backend.console(snapshot.ref)
        now = utcnow()
        first = snapshot.attempt_first_log_seq
        with session_scope(step.settings.database_url) as session:
            for host, text in sorted(consoles.items()):
                if not text.strip() or logs.has_lines(session, snapshot.ref.id, host, first):
                    continue
                lines = text.splitlines()[-MAX_CONSOLE_LINES:]
                start = max(first, logs.last_seq(session, snapshot.ref.id) + 1)
                logs.ingest(
                    session,
                    snapshot.ref.id,
                    host,
                    [
                        Line(seq, to_micros(now), "runtime", line[:MAX_LINE])
                        for seq, line in enumerate(lines, start=start)
                    ],
                )
    except (Superseded, OperationalError):
        raise  # the database is away for now: the next pass keeps them
    except Exception:
        log.exception("keeping the consoles of %s failed", snapshot.ref.name)
