"""Restarts, interruptions and back-off.

Each start of the instances is an attempt. A restart first records why (so a crash halfway
resumes the restart instead of deciding anew), then tears every instance down and bills the
attempt, waits out its back-off, and begins the next attempt, which resumes from the job's
latest checkpoint. Failures that are the job's fault (``Failure.cause``) are retried by the
job's rules, the infrastructure's (a lost instance) up to the server's budget, spot
interruptions within max_wait.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.orm import object_session

from provisioning.base import InstanceState, LaunchError
from service.jobs import lifecycle
from service.jobs.lifecycle import Event
from service.jobs.models import TrainingJob
from service.kit.db import utcnow
from service.logs import service as logs
from worker import retry_policy
from worker.reconciler.billing import attempt_worked, bill_attempt, spot_price_ratio
from worker.reconciler.ending import finish, keep_consoles
from worker.reconciler.snapshot import JobSnapshot, Pass, Report, RestartCause, RestartKind
from worker.reconciler.starting import admit, launch
from worker.retry_policy import Failure


def on_failure(
    step: Pass, snapshot: JobSnapshot, reports: dict[str, Report], failure: Failure
) -> None:
    verdict = retry_policy.decide(
        failure,
        snapshot.spec,
        restarts=snapshot.restarts,
        # Spot interruptions are bounded by max_wait, not by this budget.
        infrastructure_restarts=snapshot.infrastructure_restarts - snapshot.interruptions,
        max_infrastructure_restarts=step.settings.max_infrastructure_restarts,
    )
    if not verdict.retry:
        finish(step, snapshot, reports, Event.FAILED, verdict.reason)
        return
    kind: Literal["application", "infrastructure"] = (
        "infrastructure" if failure.infrastructure else "application"
    )
    begin_restart(step, snapshot, kind, failure.reason)


def drive_interruption(step: Pass, snapshot: JobSnapshot) -> None:
    """A spot notice: the scripts get SIGTERM and the grace to save a checkpoint, then the
    instances go and the job waits for capacity to resume."""
    backend = step.backend
    notice = snapshot.interruption_message or "spot capacity reclaimed"
    grace = step.settings.spot_grace_seconds
    if snapshot.stop_signalled_at is None:
        backend.cancel(snapshot.ref, force=False, grace_seconds=grace)
        now = utcnow()

        def signalled(job: TrainingJob) -> None:
            job.stop_signalled_at = now
            lifecycle.apply(
                job,
                Event.INTERRUPTED,
                f"Spot interruption: {notice}; the scripts got SIGTERM and {grace:g} s "
                "to save a checkpoint",
            )

        snapshot = step.update(snapshot, signalled)
    statuses = backend.describe(snapshot.ref) or {}
    running = any(s.state == InstanceState.RUNNING for s in statuses.values())
    signalled_at = snapshot.stop_signalled_at or utcnow()
    if running and utcnow() - signalled_at < timedelta(seconds=grace):
        return  # the sweep comes back
    begin_restart(step, snapshot, "interruption", f"Spot interruption: {notice}")


def await_spot_capacity(step: Pass, job_id: str, exc: LaunchError) -> None:
    """No spot capacity now: give back what was taken, wait, then launch again (a new
    attempt, so nothing of this one is adopted), within max_wait."""
    current = step.load(job_id)
    if current is not None:
        delay = step.settings.spot_capacity_retry_seconds
        begin_restart(
            step,
            current,
            "capacity",
            f"No spot capacity: {exc}; trying again in {delay:g} s",
            delay=delay,
        )


def begin_restart(
    step: Pass, snapshot: JobSnapshot, kind: RestartKind, reason: str, *, delay: float = 0.0
) -> None:
    settings = step.settings
    if kind == "application":
        delay = retry_policy.backoff_seconds(
            snapshot.restarts,
            settings.restart_backoff_seconds,
            settings.restart_backoff_max_seconds,
        )
    not_before = (utcnow() + timedelta(seconds=delay)).isoformat()
    cause = RestartCause(kind, reason[:1024], not_before)

    def restarting(job: TrainingJob) -> None:
        job.restart_cause = cause.dump()
        if kind == "capacity":
            lifecycle.apply(job, Event.RESTARTED_FOR_CAPACITY, reason)
            return
        if kind == "application":
            job.restarts += 1
            count = f"retry {job.restarts} of {snapshot.spec.max_retry_attempts}"
            message = f"Restarting ({count}) after: {reason}"
        else:
            job.infrastructure_restarts += 1
            if kind == "interruption":
                job.interruptions += 1
                message = f"{reason}; the job resumes when spot capacity is back"
            else:
                message = (
                    f"Restarting after an infrastructure failure "
                    f"({job.infrastructure_restarts} of "
                    f"{settings.max_infrastructure_restarts}): {reason}"
                )
        # An interruption's transition began with its notice, which it keeps.
        event = Event.RESTARTED_ON_INTERRUPTION if kind == "interruption" else Event.RESTARTED
        lifecycle.apply(job, event, message)

    continue_restart(step, step.update(snapshot, restarting))


def continue_restart(step: Pass, snapshot: JobSnapshot) -> None:
    """Tear the attempt down, wait out its back-off, and begin the next attempt."""
    cause = snapshot.restart_cause
    if cause is None:
        raise ValueError(f"{snapshot.ref.name} is not restarting")
    if not cause.torn_down:
        # Billed up to the attempt's end, not up to the end of its teardown.
        decided_at = utcnow()
        worked = attempt_worked(snapshot.hosts, step.reports(snapshot), decided_at)
        ended_at = worked.end if worked is not None else decided_at
        price_ratio = spot_price_ratio(snapshot, step.settings.spot_price_ratio)
        keep_consoles(step, snapshot)
        step.backend.teardown(snapshot.ref)

        def torn_down(job: TrainingJob) -> None:
            bill_attempt(job, worked, ended_at, price_ratio)
            job.restart_cause = replace(cause, torn_down=True).dump()

        snapshot = step.update(snapshot, torn_down)
    wait_seconds = (datetime.fromisoformat(cause.not_before) - utcnow()).total_seconds()
    if wait_seconds > 0:
        if cause.kind != "capacity":  # which says when it tries again itself
            message = f"Restarting in {math.ceil(wait_seconds)} s (back-off after a failed attempt)"

            def backing_off(job: TrainingJob) -> None:
                job.pending_reason = message

            step.update(snapshot, backing_off)
        return

    def next_attempt(job: TrainingJob) -> None:
        session = object_session(job)
        if session is None:
            raise ValueError(f"{job.name} is not in a session")
        # Every line of the attempt before is stored by now (its instances are gone): the
        # next attempt's lines are numbered on from them.
        job.attempt_first_log_seq = logs.last_seq(session, job.id) + 1
        job.attempt += 1
        job.restart_cause = None
        job.launched_at = None
        job.stop_signalled_at = None
        job.interruption_noticed_at = None
        job.interruption_message = None
        job.progress_first = job.progress_first_at = None
        job.progress = job.progress_at = None
        job.instances.clear()  # the new attempt's instances report afresh
        if cause.kind in ("interruption", "capacity"):
            job.admitted_at = None  # the instances went back: queue for capacity again
            lifecycle.apply(job, Event.REQUEUED)
        else:
            lifecycle.apply(job, Event.RELAUNCHING)

    snapshot = step.update(snapshot, next_attempt)
    if snapshot.admitted_at is None:
        admit(step, snapshot)
    else:
        launch(step, snapshot)
