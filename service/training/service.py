"""Jobs: submitting, stopping, and recording what instances report.

Routes call these; these flush; the request commits (a create's transaction is the batch
that ``service.training.submissions`` stores it in). Anything the worker must react to is
enqueued with ``enqueue_reconcile``, which sends only after the commit.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from contract import modes, protocol, sagemaker_flags, storage, variables
from contract.archive import ArchiveError, check_archive
from contract.hosts import host_names
from contract.images import ImageError
from contract.limits import MAX_REASON
from contract.phases import FINAL_PHASES, Phase
from contract.problems import Problem
from provisioning import registry
from provisioning.base import REDACTED, Backend, JobRef, LaunchRequest
from service.auth.access import Principal, Role
from service.auth.models import Project
from service.capacity import service as capacity
from service.jobs import file_roots, lifecycle, lookup, repository
from service.jobs.lifecycle import Event
from service.jobs.models import JobInstance, JobLease, TrainingJob
from service.jobs.schemas import (
    DryRun,
    ImageChoice,
    JobCreate,
    hyperparameters_too_large,
    nul_location,
)
from service.jobs.states import TERMINAL, Status
from service.kit.db import session_scope, utcnow
from service.kit.enqueue import enqueue_reconcile
from service.kit.errors import (
    Conflict,
    ResourceLimitExceeded,
    SpecError,
    refuse,
)
from service.logs import repository as log_repository
from service.settings import Settings
from service.sources import service as sources
from service.training import instance_credentials, project_areas

_TIMESTAMP_LEN = len("-2024-01-01-00-00-00-000")
STOP_ATTEMPTS = 3


@dataclass(frozen=True)
class PreparedJob:
    """A spec that passed every rule, with its final name, backend and output path."""

    name: str
    backend: str
    spec: JobCreate
    # For a job created through SageMaker's wire protocol: the request, as it is recorded.
    sagemaker_request: dict[str, Any] | None = None


def prepare(
    settings: Settings,
    spec: JobCreate,
    project: str,
    now: datetime | None = None,
    *,
    source_checked: bool = False,
) -> PreparedJob:
    """Check the rules that depend on this server's configuration; ``source_checked``
    skips the source, which a dry run of its upload has checked."""
    if (where := nul_location(spec.model_dump(mode="json"))) is not None:
        raise SpecError(where, "must not contain NUL characters")
    if (too_large := hyperparameters_too_large(spec.hyperparameters)) is not None:
        raise SpecError(("hyperparameters",), too_large)
    if spec.name is not None and spec.base_job_name is not None:
        raise SpecError(("name",), "give name or base_job_name, not both")
    catalog = settings.instance_catalog
    instance_type = catalog.get(spec.instance_type)
    if instance_type is None:
        known = ", ".join(sorted(catalog))
        raise SpecError(
            ("instance_type",), f"unknown instance type {spec.instance_type!r}; known: {known}"
        )
    backend = spec.backend or settings.backends.get(spec.instance_type)
    if backend is None:
        raise SpecError(
            ("instance_type",),
            f"no backend on this server runs {spec.instance_type} (see RUNYARD_BACKENDS)",
        )
    plugin = registry.PLUGINS.get(backend)
    if plugin is None:
        raise SpecError(
            ("backend",), f"unknown backend {backend!r}; known: {', '.join(registry.PLUGINS)}"
        )
    if spec.instance_type not in plugin.instance_types(catalog):
        raise SpecError(("backend",), f"backend {backend!r} cannot run {spec.instance_type}")
    # Only the server's backends are reaped and sized for (the reconciler's lease), so a
    # job may pick among them, not bring another.
    enabled = sorted(set(settings.backends.values()))
    if backend not in enabled:
        raise SpecError(
            ("backend",),
            f"backend {backend!r} is not enabled on this server (RUNYARD_BACKENDS uses: "
            f"{', '.join(enabled)})",
        )
    if spec.instance_count > settings.max_instance_count:
        raise SpecError(
            ("instance_count",),
            f"{spec.instance_count} is above this server's maximum "
            f"of {settings.max_instance_count}",
        )
    impossible = capacity.never_fits(settings, spec.instance_type, spec.instance_count, project)
    if impossible is not None:
        raise SpecError(("instance_count",), f"can never start: {impossible}")
    _check_retry_rules(spec)
    image = _choose_image(settings, spec)
    if image.container is None and spec.container_entrypoint is None:
        # Runyard's runtime runs a script; a custom container brings its own program.
        for name in ("entry_point", "source_uri"):
            if getattr(spec, name) is None:
                raise SpecError((name,), "Field required")
    distribution = spec.distribution.as_dict()
    mode_problems = modes.problems(
        distribution, spec.framework, instance_count=spec.instance_count, gpus=instance_type.gpus
    )
    refuse(
        sagemaker_flags.at_flags(mode_problems)
        if spec.distribution_named_by_flags
        else mode_problems
    )
    output_path = spec.output_path or project_areas.output_root(settings.artifact_root, project)
    name = spec.name or _generate_name(spec, now or utcnow())
    # Before anything looks at the files: a refusal must not tell what is there.
    located = spec.model_copy(update={"output_path": output_path}).job_spec()
    refuse(file_roots.problems(located, settings.file_roots))
    refuse(project_areas.problems(located, name, settings.artifact_root, project))
    if settings.instance_credentials == "service":
        try:  # refused now, not when the instances first ask for the job's credentials
            instance_credentials.session_policy(located, name)
        except Conflict as exc:
            raise SpecError(("inputs",), exc.message) from None
    if not source_checked:
        _check_source(spec, settings.max_source_bytes)
    _check_inputs(spec)
    _check_output_path(("output_path",), output_path)
    if spec.checkpoint_s3_uri is not None:
        _check_output_path(("checkpoint_s3_uri",), spec.checkpoint_s3_uri)
    final = spec.model_copy(
        update={
            "name": name,
            "base_job_name": None,
            "backend": backend,
            "output_path": output_path,
            # One the client sent is kept.
            "hyperparameters": {**modes.hyperparameters(distribution), **spec.hyperparameters},
            "image": image,
        }
    )
    # What only the backend knows: whether its instances could reach the code and data.
    built = registry.build(backend, settings)
    refuse(built.check(final.job_spec(), settings.public_url))
    if settings.local_shared_projects == "one":
        refuse(_shared_machine_problems(settings, built))
    return PreparedJob(name=name, backend=backend, spec=final)


def _shared_machine_problems(settings: Settings, backend: Backend[Any]) -> list[Problem]:
    """Instances that share a machine can read any other job's files and the server's:
    the server takes such jobs only while it serves one project, unless its operator says
    every project may (RUNYARD_LOCAL_SHARED_PROJECTS=many)."""
    why = backend.shared_because()
    if why is None:
        return []
    with session_scope(settings.database_url, readonly=True) as session:
        projects = session.scalar(select(func.count()).select_from(Project)) or 0
    if projects <= 1:
        return []
    return [
        Problem(
            ("backend",),
            f"local instances would share this machine ({why}), where a job of one of this "
            f"server's {projects} projects could read another's data; give the instances "
            "namespaces, or set RUNYARD_LOCAL_SHARED_PROJECTS=many to take jobs of every "
            "project anyway",
        )
    ]


def _choose_image(settings: Settings, spec: JobCreate) -> ImageChoice:
    """The image the job's fields name, from this server's catalog (or a container's)."""
    if spec.image is not None:
        raise SpecError(
            ("image",),
            "is set by the server: name an image with image_uri, or with framework_version "
            "and py_version",
        )
    try:
        choice = settings.catalog.choose(
            framework=spec.framework,
            framework_version=spec.framework_version,
            py_version=spec.py_version,
            image_uri=spec.image_uri,
        )
    except ImageError as exc:
        raise SpecError((exc.field,), str(exc)) from exc
    return ImageChoice(name=choice.image, container=choice.container)


def checks_reach_network(settings: Settings, spec: JobCreate) -> bool:
    """Whether ``prepare`` would look beyond this machine's files for the job (its code,
    data or outputs on s3://): checks that may wait on the network. The output path not
    given is one under the artifact root, on the root's storage."""
    located = spec.model_copy(update={"output_path": spec.output_path or settings.artifact_root})
    uris = located.job_spec().storage_uris().values()
    return any(urlsplit(uri).scheme != "file" for uri in uris)


def _generate_name(spec: JobCreate, now: datetime) -> str:
    # As the SageMaker SDK does: <base>-<UTC timestamp to the millisecond>.
    stem = PurePosixPath(spec.entry_point or "job").stem
    base = spec.base_job_name or re.sub(r"[^a-zA-Z0-9]+", "-", stem)
    base = base.strip("-")[: 63 - _TIMESTAMP_LEN].rstrip("-") or "job"
    return f"{base}-{now:%Y-%m-%d-%H-%M-%S}-{now.microsecond // 1000:03d}"


def _check_source(spec: JobCreate, max_source_bytes: int) -> None:
    if spec.source_uri is None or spec.entry_point is None:
        return  # a container entry point brings its own code
    located = _Source(spec.source_uri, spec.entry_point)
    try:
        if storage.scheme(located.uri) == "file":
            _check_source_at(located, storage.local_path(located.uri))
        else:
            _check_remote_source(located, max_source_bytes)
    except storage.StorageError as exc:
        raise SpecError(("source_uri",), str(exc)) from exc
    except OSError as exc:  # e.g. a directory the server may not enter
        raise SpecError(("source_uri",), f"cannot read it: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class _Source:
    """A job's code, and the entry point that must be in it."""

    uri: str
    entry_point: str


def _check_source_at(spec: _Source, source: Path) -> None:
    if source.is_dir():
        if not (source / spec.entry_point).is_file():
            raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {spec.uri}")
        return
    if not source.is_file():
        raise SpecError(("source_uri",), f"{spec.uri} does not exist")
    _check_tarball(spec, source)


def _check_remote_source(spec: _Source, max_source_bytes: int) -> None:
    """A prefix must hold the entry point; a tarball is fetched (no larger than an upload
    may be) and checked as an uploaded one is."""
    uri = spec.uri
    if storage.is_dir(uri):
        if not storage.is_file(storage.join(uri, spec.entry_point)):
            raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {uri}")
        return
    objects = storage.list_objects(uri) if storage.is_file(uri) else []
    if not objects:
        raise SpecError(("source_uri",), f"{uri} does not exist")
    if objects[0][1] > max_source_bytes:
        raise SpecError(("source_uri",), f"{uri} is larger than {max_source_bytes} bytes")
    with tempfile.TemporaryDirectory(prefix="runyard-source-check-") as scratch:
        _check_tarball(spec, storage.fetch(uri, Path(scratch)))


def _check_tarball(spec: _Source, source: Path) -> None:
    if not source.name.endswith((".tar.gz", ".tgz", ".tar")):
        raise SpecError(("source_uri",), "must be a directory or a .tar.gz archive")
    found = source.stat()
    try:
        files = _archive_files(str(source), found.st_size, found.st_mtime_ns)
    except ArchiveError as exc:
        raise SpecError(("source_uri",), str(exc)) from exc
    if spec.entry_point not in files:
        raise SpecError(("entry_point",), f"{spec.entry_point} is not a file in {spec.uri}")


@functools.lru_cache(maxsize=256)
def _archive_files(path: str, _size: int, _mtime_ns: int) -> frozenset[str]:
    """The files of a tarball that passed the checks. Many jobs name one uploaded source
    (stored under its digest, never rewritten): it is read once, not once per job. A file
    changed in place has another size or time, so it is read again."""
    return frozenset(check_archive(Path(path)))


def _check_inputs(spec: JobCreate) -> None:
    for name, channel in spec.inputs.items():
        loc = ("inputs", name)
        # Every input mode and compression is served by the runtime (runtime.channels);
        # what can be known here is whether the data is there. A manifest must be an
        # object itself; its entries are checked on the instances, before the script.
        manifest = channel.s3_data_type == "ManifestFile"
        try:
            exists = storage.is_file(channel.uri) if manifest else storage.exists(channel.uri)
        except storage.StorageError as exc:
            raise SpecError((*loc, "uri"), str(exc)) from exc
        except OSError as exc:
            raise SpecError((*loc, "uri"), f"cannot read it: {exc.strerror or exc}") from exc
        if not exists:
            what = "is not a manifest file or object" if manifest else "does not exist"
            raise SpecError((*loc, "uri"), f"{channel.uri} {what}")


def dry_run(session: Session, settings: Settings, spec: JobCreate, project: str) -> DryRun:
    """Exactly what submitting would create (the backend's materialized plan), creating nothing.
    The source may be one still to be uploaded (a dry run stores no code either)."""
    pending = spec.source_uri is not None and sources.is_pending(settings, spec.source_uri)
    prepared = prepare(settings, spec, project, source_checked=pending)
    if repository.name_taken(session, prepared.name, project):
        raise Conflict(f"a training job named {prepared.name!r} already exists")
    backend = registry.build(prepared.backend, settings)
    job_spec = prepared.spec.job_spec()
    # The job's own credentials (by their names) are not shown back either.
    shown = {
        name: REDACTED if variables.is_secret_name(name) else value
        for name, value in job_spec.environment.items()
    }
    request = LaunchRequest(
        job=JobRef(id=uuid.uuid4().hex, name=prepared.name),
        spec=dataclasses.replace(job_spec, environment=shown),
        service_url=settings.public_url,
        tokens=dict.fromkeys(host_names(spec.instance_count), REDACTED),
        agent_key=REDACTED,
        file_roots=tuple(str(root) for root in settings.file_roots),
        aws_credentials=settings.service_gives_credentials,
    )
    materialized = backend.materialize(request)
    return DryRun(
        name=prepared.name,
        backend=prepared.backend,
        plan=materialized.public,
        rendered=materialized.render(),
    )


def _check_output_path(loc: tuple[str, ...], uri: str) -> None:
    """Outputs (the model, checkpoints) must be storable there: a directory, or one that
    can be made; for S3, a bucket this server can list (writing is only known when the
    first object is written)."""
    try:
        if storage.scheme(uri) == "s3":
            storage.is_dir(uri)  # a listing fails on a missing bucket or a denied one
            return
        path = storage.local_path(uri)
    except storage.StorageError as exc:
        raise SpecError(loc, str(exc)) from exc
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(loc, f"{uri}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(loc, f"{uri}: {existing} is not writable by the server")


def _check_retry_rules(spec: JobCreate) -> None:
    # A rule that retries with no attempts allowed would silently never retry.
    if spec.max_retry_attempts == 0:
        for index, rule in enumerate(spec.retry_rules):
            if rule.action == "retry":
                raise SpecError(
                    ("retry_rules", index, "action"),
                    "retries, but max_retry_attempts is 0: set how many retries are allowed",
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
    try:
        repository.insert_new(session, jobs)
    except IntegrityError as exc:  # the name is taken (or was, a moment ago)
        if len(jobs) > 1:
            raise
        raise Conflict(f"a training job named {jobs[0].name!r} already exists") from exc
    for job, waiting in zip(jobs, waits, strict=True):
        if not waiting:
            enqueue_reconcile(session, settings, job.id)
    return jobs


def _new_job(prepared: PreparedJob, project: str) -> TrainingJob:
    job = TrainingJob(
        id=uuid.uuid4().hex,
        name=prepared.name,
        spec=prepared.spec.model_dump(mode="json", exclude_none=True),
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
    session: Session, settings: Settings, name: str, user: Principal, project: str | None = None
) -> TrainingJob:
    # The job is read locked, so the reconciler cannot write it between our read and our
    # write (on PostgreSQL; SQLite's writer holds the whole database); should the version
    # check still find it changed, read again and decide again.
    in_line = False
    for _ in range(STOP_ATTEMPTS):
        job = lookup.get(session, name, user, project, to_change=True)
        user.require(Role.MEMBER, job.project, "stopping a job")
        if job.status in TERMINAL:
            raise Conflict(f"training job {name!r} has already ended ({job.status})")
        if job.status == Status.STOPPING:
            break
        lifecycle.apply(job, Event.STOP_REQUESTED, "Stopping at the user's request")
        in_line = _never_launched(job)
        try:
            if in_line:  # its reads flush the change above first: it may be stale too
                _stop_in_line(session, job)
            session.flush()
            break
        except StaleDataError:
            session.rollback()
            session.expunge_all()
    else:
        raise Conflict(f"training job {name!r} kept changing; try again")
    if not in_line:
        enqueue_reconcile(session, settings, job.id)
    return job


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
    log_repository.append_service_line(
        session,
        job.id,
        lookup.hosts(job)[0],
        "Training job stopped at a user's request (runyard stop, or StopTrainingJob)",
        now,
    )
    job.ended_at = now


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
    if phase in FINAL_PHASES:
        row.training_ended_at = report.time
        row.exit_code = report.exit_code
        row.failure_reason = report.failure_reason
    if report.model_uri:
        row.model_uri = report.model_uri
    session.flush()
    enqueue_reconcile(session, settings, job.id)


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
    if not job.spec.get("use_spot_instances"):
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
