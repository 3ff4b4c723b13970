"""Deleting an ended job: its rows, and its artifacts when asked.

The job's transitions, instances, metrics and log lines go with its row (their foreign
keys cascade). Its artifacts are only ever looked for below ``<output_path>/<name>/``,
where its instances wrote: an output path is often shared by many jobs (the artifact
root), so nothing beside that folder is touched.
"""

from __future__ import annotations

import os
from typing import Literal

from sqlalchemy import delete as sql_delete
from sqlalchemy.orm import Session

from contract import storage
from service.auth.access import Principal, Role
from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.jobs.schemas import JobDeleted
from service.jobs.states import TERMINAL
from service.kit.errors import Conflict

ArtifactsChoice = Literal["keep", "remove"]


def delete(
    session: Session,
    name: str,
    user: Principal,
    project: str | None,
    artifacts: ArtifactsChoice,
) -> JobDeleted:
    job = lookup.get(session, name, user, project, to_change=True)
    user.require(Role.MEMBER, job.project, "deleting a job")
    if job.status not in TERMINAL:
        raise Conflict(
            f"training job {name!r} has not ended ({job.status}); stop it first "
            f"(runyard stop {name})"
        )
    folder = storage.join(job.record.output_path, job.name)
    job_id = job.id
    session.expunge(job)
    session.execute(sql_delete(TrainingJob).where(TrainingJob.id == job_id))
    # Flushed before any file goes: should the rows stay (a conflict), so do the files.
    session.flush()
    removed = remove_artifacts(folder) if artifacts == "remove" else 0
    return JobDeleted(
        name=name, artifacts="removed" if artifacts == "remove" else "kept", removed_objects=removed
    )


def remove_artifacts(folder: str) -> int:
    """Remove every object below ``folder`` (a job's own), none beside it; how many."""
    if not storage.is_dir(folder):
        return 0
    inside = folder.rstrip("/") + "/"
    objects = [item.uri for item in storage.listing(folder) if item.uri.startswith(inside)]
    for uri in objects:
        storage.remove(uri)
    if storage.scheme(folder) == "file":
        _remove_empty_directories(str(storage.local_path(folder)))
    return len(objects)


def _remove_empty_directories(top: str) -> None:
    # Bottom up, links never followed: a directory that still holds anything stays.
    for directory, _dirs, _files in os.walk(top, topdown=False):
        try:
            os.rmdir(directory)
        except OSError:
            continue
