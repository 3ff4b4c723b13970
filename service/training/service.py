"""Jobs: submitting, stopping, and recording what instances report.

Routes call these; these flush; the request commits (a create's transaction is the batch
that ``service.training.submissions`` stores it in). Anything the worker must react to is
enqueued with ``enqueue_reconcile``, which sends only after the commit.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from contract import protocol, variables
from contract.failure_causes import untyped_cause
from contract.hosts import host_names
from contract.limits import MAX_REASON
from contract.phases import FINAL_PHASES, Phase
from provisioning import registry
from provisioning.base import REDACTED, JobRef, LaunchError, LaunchRequest
from service.auth.access import Principal, Role
from service.capacity import service as capacity
from service.grants import service as grants
from service.jobs import lifecycle, lookup, record, repository
from service.jobs.lifecycle import Event
from service.jobs.models import JobInstance, JobLease, TrainingJob
from service.jobs.schemas import DryRun, JobCreate
from service.jobs.states import TERMINAL, Status
from service.kit.db import utcnow
from service.kit.enqueue import enqueue_reconcile
from service.kit.errors import (
    Conflict,
    ResourceLimitExceeded,
    RunyardError,
    SpecError,
)
from service.logs import repository as log_repository
from service.settings import Settings
from service.sources import service as sources
from service.training.preparation import PreparedJob, prepare

log = logging.getLogger(__name__)

STOP_ATTEMPTS = 3
STOP_REASON = "Stopping at the user's request"


def dry_run(session: Session, settings: Settings, spec: JobCreate, project: str) -> DryRun:
    """Exactly what submitting would create (the backend's materialized plan), creating nothing.
    The source may be one still to be uploaded (a dry run stores no code either). Planning
    asks no one: what only a launch decides the plan shows as decided at launch, so this
    answers the same whatever the machine's state (pip, the network, its routes)."""
    pending = spec.source_uri is not None and sources.is_pending(settings, spec.source_uri)
    prepared = prepare(settings, spec, project, source_checked=pending)
    if repository.name_taken(session, prepared.name, project):
        raise Conflict(f"a training job named {prepared.name!r} already exists")
    backend = registry.build(prepared.backend, settings)
    job_spec = prepared.spec.job_spec()
    roots = grants.instance_roots(settings, grants.places(session, settings, project))
    # The job's own credentials (by their names) are not shown back either.
    shown = variables.masked(job_spec.environment)
    request = LaunchRequest(
        job=JobRef(id=uuid.uuid4().hex, name=prepared.name),
        spec=dataclasses.replace(job_spec, environment=shown),
        service_url=settings.public_url,
        tokens=dict.fromkeys(host_names(spec.instance_count), REDACTED),
        agent_key=REDACTED,
        file_roots=roots.writable,
        read_only_roots=roots.read_only,
        confine_files=roots.confined,
        aws_credentials=settings.service_gives_credentials,
        instance_metrics_seconds=settings.instance_metrics_seconds,
    )
    try:
        materialized = backend.materialize(request)
    except LaunchError as exc:
        # What this backend could not plan here: the job's to change, or the operator's.
        why = f"the {prepared.backend} backend cannot plan this job here: {exc}"
        raise SpecError(("backend",), why) from exc
    resolved = prepared.spec.model_copy(
        update={"environment": variables.masked(prepared.spec.environment)}
    )
    return DryRun(
        name=prepared.name,
        backend=prepared.backend,
        hosts=list(host_names(spec.instance_count)),
        spec=resolved,
        plan=materialized.public,
        rendered=materialized.render(),
    )


def submit(
    session: Session,
    settings: Settings,
    spec: JobCreate,
    project: str,
    *,
    sagemaker_request: dict[str, Any] | None = None,
) -> TrainingJob:
    prepared = replace(prepare(settings, spec, project), sagemaker_request=sagemaker_request)
    if settings.on_capacity_exceeded == "refuse":
        busy = capacity.fits_now(
            session, settings, spec.instance_type, spec.instance_count, project
        )
        if busy is not None:
            raise ResourceLimitExceeded(busy)
    return store_new(session, settings, [(prepared, project)])[0]


def store_new(
    session: Session, settings: Settings, submitted: list[tuple[PreparedJob, str]]
) -> list[TrainingJob]:
    """Store jobs that passed ``prepare`` (each with its project) in the caller's
    transaction, together: one INSERT per table for them all. A name in use is found by
    the insert (the unique constraint), with no read first: Conflict for a single job,
    IntegrityError for several (the caller may then store each alone). The jobs returned
    are not in the session (see ``repository.insert_new``)."""
    jobs = [_new_job(prepared, project) for prepared, project in submitted]
    waits = _wait_in_line(session, settings, jobs)
    written = {job.id: prepared.written for job, (prepared, _) in zip(jobs, submitted, strict=True)}
    try:
        repository.insert_new(session, jobs, written)
    except IntegrityError as exc:  # the name is taken (or was, a moment ago)
        if len(jobs) > 1:
            raise
        raise Conflict(f"a training job named {jobs[0].name!r} already exists") from exc
    for job, waiting in zip(jobs, waits, strict=True):
        if not waiting:
            enqueue_reconcile(session, settings, job.id)
    return jobs


def _new_job(prepared: PreparedJob, project: str) -> TrainingJob:
    stored = prepared.spec.dump()
    job = TrainingJob(
        id=uuid.uuid4().hex,
        name=prepared.name,
        spec=stored,
        backend=prepared.backend,
        project=project,
        priority=prepared.spec.priority,
        created_at=utcnow(),
        sagemaker_request=prepared.sagemaker_request,
        # The first version, as the ORM numbers them (the column is its version_id_col).
        version=1,
        # A new job has no instances or final metrics yet: saying so spares the
        # response two queries that could only find nothing.
        instances=[],
        final_metrics=[],
    )
    record.remember(job.id, stored, prepared.spec)
    lifecycle.submitted(job, "Preparing the instances")
    job.lease = JobLease()
    return job


def _wait_in_line(session: Session, settings: Settings, jobs: list[TrainingJob]) -> list[bool]:
    """Record each new job waiting in line if it must (its type's capacity, its project's
    quota, or jobs ahead of it are in the way): what frees capacity wakes it, and until
    then the worker has nothing to do for it. Only the worker admits a job, so one that
    may fit is left to it; with ``on_capacity_exceeded=refuse`` every job accepted fits.
    Whether each job waits."""
    if settings.on_capacity_exceeded == "refuse":
        return [False for _ in jobs]
    waiting = set()
    for job, verdict in zip(jobs, capacity.forecast(session, settings, jobs), strict=True):
        if not verdict.admitted:
            lifecycle.apply(job, Event.WAITING, verdict.reason)
            waiting.add(job.id)
    return [job.id in waiting for job in jobs]


def stop(
    session: Session,
    settings: Settings,
    name: str,
    user: Principal,
    project: str | None = None,
    *,
    reason: str = STOP_REASON,
) -> TrainingJob:
    """Stop the job; ``reason``: its stop's message (a tuner stopping a trial early says
    why)."""
    # The job is read locked, so the reconciler cannot write it between our read and our
    # write (on PostgreSQL; SQLite's writer holds the whole database); should the version
    # check still find it changed, read again and decide again.
    for _ in range(STOP_ATTEMPTS):
        # Its instances are read only if it has any (the reply shows them).
        job = lookup.get(session, name, user, project, to_change=True, with_instances=False)
        try:
            _begin_stop(session, settings, job, user, reason)
            # One flush for both changes; a stale job is found here, and what was
            # written meanwhile (the log line) is rolled back with it.
            session.flush()
        except StaleDataError:
            session.rollback()
            session.expunge_all()
            continue
        note_stop(user)
        return job
    raise Conflict(f"training job {name!r} kept changing; try again")


def stop_many(
    session: Session, settings: Settings, wanted: Sequence[tuple[str, Principal, str | None]]
) -> list[TrainingJob | RunyardError]:
    """Stop each (name, caller, project) of ``wanted`` in the session's one transaction:
    the jobs read (locked) in one statement and written in one flush. Each gets its job, or
    what refused its stop; anything else raised (a job changed meanwhile) is the caller's
    to handle, for the whole batch, which is then not committed. Logs nothing: the caller
    notes each stop (``note_stop``) in its own request's log context."""
    found = lookup.get_many_to_change(
        session, [(name, user, project) for name, user, project in wanted]
    )
    stopped: list[TrainingJob | RunyardError] = []
    for job, (_, user, _) in zip(found, wanted, strict=True):
        outcome: TrainingJob | RunyardError = job
        try:
            if isinstance(job, TrainingJob):
                _begin_stop(session, settings, job, user, STOP_REASON)
        except RunyardError as refused:  # this stop's own: the others go on
            outcome = refused
        stopped.append(outcome)
    session.flush()
    return stopped


def note_stop(user: Principal) -> None:
    """For operators: who stopped what (the line names the job and the request, from the
    context it is logged in)."""
    log.info("stop requested by %s", user.name)


def _begin_stop(
    session: Session, settings: Settings, job: TrainingJob, user: Principal, reason: str
) -> None:
    """Move ``job`` to Stopping (a job that never launched on to Stopped, at once) for
    ``user``, or refuse; flushed by the caller. The worker is told after the commit."""
    user.require(Role.MEMBER, job.project, "stopping a job")
    if job.status in TERMINAL:
        raise Conflict(f"training job {job.name!r} has already ended ({job.status})")
    if job.status != Status.STOPPING:
        lifecycle.apply(job, Event.STOP_REQUESTED, reason)
        if _never_launched(job):
            repository.has_no_instances(job)
            _stop_in_line(session, job)
            return
    enqueue_reconcile(session, settings, job.id)


def _never_launched(job: TrainingJob) -> bool:
    """Whether the job is still waiting for its first instances: nothing of it exists on
    any backend, so a stop has nothing to wait for."""
    return job.attempt == 0 and job.admitted_at is None and job.restart_cause is None


def _stop_in_line(session: Session, job: TrainingJob) -> None:
    """Stop a job that never launched at once, as the worker would end it: it holds no
    capacity and has no instances. (The version check on the job row keeps a reconciler
    that admits it meanwhile from going on: one of the two writes fails and reads again.)"""
    now = utcnow()
    lifecycle.apply(job, Event.STOPPED, "Training job stopped", now)
    job.ended_at = now
    # Not flushed first: the caller's one flush writes the job's changes together.
    with session.no_autoflush:
        log_repository.append_service_line(
            session,
            job.id,
            lookup.hosts(job)[0],
            "Training job stopped at a user's request (runyard stop, or StopTrainingJob)",
            now,
        )


def record_report(
    session: Session, settings: Settings, job: TrainingJob, host: str, report: protocol.StatusReport
) -> None:
    """Store what the runtime on ``host`` says; the reconciler turns it into job state."""
    if job.status in TERMINAL:
        return  # late words from an instance being torn down change nothing
    # Read under a row lock: a restart committing meanwhile must not take this report for
    # its new attempt's (PostgreSQL; SQLite's write transaction already excludes it).
    attempt = session.scalar(
        select(TrainingJob.attempt).where(TrainingJob.id == job.id).with_for_update()
    )
    if report.attempt is not None and report.attempt != attempt:
        return  # an earlier attempt's instance, torn down since: the job has moved on
    phase = Phase(report.phase)
    row = repository.instance(session, job.id, host)
    if row is None:
        row = JobInstance(job_id=job.id, host=host, phase=phase)
        session.add(row)
    elif row.phase in FINAL_PHASES:
        return  # an instance's result never changes once reported
    row.phase = phase
    row.message = report.message
    row.reported_at = utcnow()
    # SageMaker's training time runs from the instance's start (its runtime's first
    # report, downloads ahead) to its result (after the model's upload): what is billed.
    if row.training_started_at is None:
        row.training_started_at = report.time
    if phase in (Phase.UPLOADING, *FINAL_PHASES) and row.script_ended_at is None:
        row.script_ended_at = report.time
    if phase == Phase.TRAINING and row.training_reported_at is None:
        row.training_reported_at = report.time
    if phase == Phase.UPLOADING and row.uploading_reported_at is None:
        row.uploading_reported_at = report.time
    if phase in FINAL_PHASES:
        row.training_ended_at = report.time
        row.exit_code = report.exit_code
        row.failure_reason = report.failure_reason
        row.failure_cause = _cause(report)
    if report.model_uri:
        row.model_uri = report.model_uri
    session.flush()
    enqueue_reconcile(session, settings, job.id)


def _cause(report: protocol.StatusReport) -> str | None:
    """Why a Failed instance failed, as its runtime said, or as the reconciler read the
    reasons of runtimes that predate saying it; None for any other result."""
    if report.phase != Phase.FAILED:
        return None
    if report.failure_cause is not None:
        return report.failure_cause.value
    return untyped_cause(report.failure_reason, report.exit_code).value


def notice_interruption(
    session: Session,
    settings: Settings,
    job: TrainingJob,
    host: str,
    notice: protocol.InterruptionNotice,
) -> TrainingJob:
    """A spot interruption notice for one of the job's instances (from the runtime on
    EC2, which saw the two-minute warning, or sent by hand to simulate one): the
    reconciler gives the scripts their grace, then restarts the job on new capacity."""
    if not job.record.use_spot_instances:
        raise Conflict(f"training job {job.name!r} does not run on spot instances")
    if job.status != Status.IN_PROGRESS or job.launched_at is None:
        raise Conflict(f"training job {job.name!r} has no running instances to interrupt")
    if notice.attempt is not None and notice.attempt != job.attempt:
        return job  # from an earlier attempt's instance, which is gone already
    if job.interruption_noticed_at is None:
        job.interruption_noticed_at = utcnow()
        job.interruption_message = f"{host}: {notice.message}"[:MAX_REASON]
        try:
            session.flush()
        except StaleDataError as exc:
            raise Conflict(f"training job {job.name!r} changed meanwhile; try again") from exc
        enqueue_reconcile(session, settings, job.id)
    return job
