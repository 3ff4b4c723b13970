"""Finding a job as a caller may see it: by name within a project, a page of a project's
jobs, or the job an instance's token speaks for. Below the domains that hang off a job
(capacity, logs, metrics, sources), which look jobs up through it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from contract import storage
from contract.hosts import host_names
from service.auth.access import Principal
from service.jobs import repository
from service.jobs.listing import JobFilters
from service.jobs.models import TrainingJob
from service.jobs.states import TERMINAL
from service.kit.errors import Conflict, Forbidden, NotFound

# No project has this name (names are checked against NAME_PATTERN): a filter that matches
# nothing, for a project the caller may not list.
_NO_PROJECT = "/"


def get(
    session: Session,
    name: str,
    viewer: Principal,
    project: str | None = None,
    *,
    to_change: bool = False,
    with_instances: bool = True,
) -> TrainingJob:
    """The job of that name in the caller's project (a server administrator may name
    another). A project the caller cannot see holds no jobs: the answer is the same
    NotFound as for a name no job has. ``to_change``, ``with_instances``: see
    ``repository.get``."""
    project = project or viewer.project
    job = (
        repository.get(
            session,
            name,
            project,
            with_details=True,
            to_change=to_change,
            with_instances=with_instances,
        )
        if viewer.sees(project)
        else None
    )
    if job is None:
        raise _no_job(name)
    return job


def _no_job(name: str) -> NotFound:
    return NotFound(f"no training job named {name!r}")


def get_many_to_change(
    session: Session, wanted: Sequence[tuple[str, Principal, str | None]]
) -> list[TrainingJob | NotFound]:
    """For each (name, caller, project) of ``wanted``, the job as ``get`` finds it to
    change (its instances read when first looked at), or its NotFound: every job read, and
    locked, by one statement."""
    keys = [_key_in_sight(name, viewer, project) for name, viewer, project in wanted]
    found = repository.get_many_to_change(session, [key for key in keys if key is not None])
    jobs = [found.get(key) if key is not None else None for key in keys]
    return [
        job if job is not None else _no_job(name)
        for job, (name, _, _) in zip(jobs, wanted, strict=True)
    ]


def _key_in_sight(name: str, viewer: Principal, project: str | None) -> tuple[str, str] | None:
    """The (project, name) of a job the caller names, or None where the caller cannot see
    that project: it holds no jobs for the caller, as for ``get``."""
    project = project or viewer.project
    return (project, name) if viewer.sees(project) else None


def list_jobs(
    session: Session,
    viewer: Principal,
    filters: JobFilters,
    *,
    limit: int,
    cursor: str | None,
    sort: str,
) -> tuple[list[Row[Any]], str | None]:
    """The jobs of the caller's project (a server administrator: of ``filters.project``,
    or of every project), as rows of ``repository.SUMMARY_COLUMNS``; another project
    asked for by name lists nothing."""
    project = filters.project
    if not viewer.server_admin:
        project = viewer.project if project in (None, viewer.project) else _NO_PROJECT
    return repository.page(
        session, replace(filters, project=project), limit=limit, cursor=cursor, sort=sort
    )


def status_of(session: Session, job_id: str) -> str:
    return repository.status_of(session, job_id) or ""


def job_for_instance(
    session: Session, name: str, host: str, principal: Principal, *, live: bool = False
) -> TrainingJob:
    """The job an instance reports for; only that job's own token may report for it, and
    with ``live`` only while the job has not ended (its instances are gone by then)."""
    if principal.kind != "job" or principal.job_id is None:
        raise Forbidden("only a job's own instances may report for it")
    # The token names the job; the path's name must agree with it.
    job = repository.get_by_id(session, principal.job_id)
    if job is None or job.name != name:
        raise Forbidden("an instance may report for itself only")
    if principal.host != host:
        raise Forbidden("an instance may report for itself only")
    if host not in hosts(job):
        raise NotFound(f"training job {name!r} has no host {host!r}")
    if live and job.status in TERMINAL:
        raise Conflict(f"training job {name!r} has ended ({job.status})")
    return job


def model_uri(job: TrainingJob) -> str:
    """Where the runtime is told to store the job's model (``storage.model_uri``)."""
    record = job.record
    return storage.model_uri(record.output_path, job.name, record.output_compression)


def stored_model(job: TrainingJob) -> tuple[str, int]:
    """Where the job's model is, and its size, for a download. Only the place the runtime
    is told to store it counts: the URI an instance reported is the instance's word, and
    serving whatever it named would let a job's script read any file through the API."""
    record = job.record
    expected = model_uri(job)
    if job.model_artifacts != expected:
        raise NotFound(f"training job {job.name!r} has no model stored")
    if record.output_compression == "NONE":
        raise Conflict(
            f"training job {job.name!r} stored its model as files (output_compression "
            f"NONE), not as a model.tar.gz: they are under {expected}"
        )
    try:
        return expected, storage.size(expected)
    except storage.StorageError as exc:
        raise NotFound(f"the model of {job.name!r} is no longer in the artifact store") from exc


def stored_output_data(job: TrainingJob) -> tuple[str, int]:
    """Where the job's output data (output.tar.gz) is, and its size, for a download: only
    where the runtime is told to store it, which a script has no say in."""
    expected = storage.output_data_uri(job.record.output_path, job.name)
    try:
        return expected, storage.size(expected)
    except storage.StorageError as exc:
        raise NotFound(f"training job {job.name!r} has no output data stored") from exc


def hosts(job: TrainingJob) -> list[str]:
    return host_names(job.record.instance_count)
