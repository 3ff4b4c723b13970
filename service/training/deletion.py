"""Deleting an ended job: its rows, and its artifacts when asked.

The job's transitions, instances, metrics and log lines go with its row (their foreign
keys cascade). Its artifacts are only ever looked for below ``<output_path>/<name>/``,
where its instances wrote: an output path is often shared by many jobs (the artifact
root), so nothing beside that folder is touched. Nor is the folder touched where a job
of another project writes or wrote in it too (``JobWritePlace``, a job from before
places were recorded that named the same folder): what is there is not only this job's.
On ``file://`` the folder is reached from the file root that holds it, and emptied,
without following any link: a link planted on the way or inside leads nowhere.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from sqlalchemy import delete as sql_delete
from sqlalchemy.orm import Session

from contract import storage, untrusted
from contract.file_confinement import inside
from service.auth.access import Principal, Role
from service.grants import service as grants
from service.grants.checks import written_at
from service.grants.places import keys
from service.jobs import lookup
from service.jobs.models import JobWritePlace, TrainingJob
from service.jobs.schemas import JobDeleted
from service.jobs.states import TERMINAL
from service.kit.errors import Conflict
from service.settings import Settings

ArtifactsChoice = Literal["keep", "remove"]


def delete(
    session: Session,
    settings: Settings,
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
    folder = written_at(job.record.output_path, job.name)
    removing = artifacts == "remove"
    if removing and grants.taken_by_others(session, job.project, keys(folder)):
        raise Conflict(
            f"training job {name!r}: a job of another project writes or wrote in {folder} "
            "too, so what is there is not this job's alone; delete the job with its "
            "artifacts kept"
        )
    job_id = job.id
    session.expunge(job)
    if removing:
        # Its folder is nobody's once emptied; its checkpoints stay, and stay its project's.
        session.execute(
            sql_delete(JobWritePlace).where(
                JobWritePlace.job_id == job_id, JobWritePlace.key.in_(keys(folder))
            )
        )
    session.execute(sql_delete(TrainingJob).where(TrainingJob.id == job_id))
    # Flushed before any file goes: should the rows stay (a conflict), so do the files.
    session.flush()
    removed = remove_artifacts(folder, settings.file_roots) if removing else 0
    return JobDeleted(
        name=name, artifacts="removed" if removing else "kept", removed_objects=removed
    )


def remove_artifacts(folder: str, roots: Sequence[Path]) -> int:
    """Remove every object below ``folder`` (a job's own), none beside it; how many. A
    ``file://`` folder only where one of ``roots`` holds it."""
    if storage.scheme(folder) == "file":
        return _remove_local(storage.local_path(folder), roots)
    if not storage.is_dir(folder):
        return 0
    inside_folder = folder.rstrip("/") + "/"
    objects = [item.uri for item in storage.listing(folder) if item.uri.startswith(inside_folder)]
    for uri in objects:
        storage.remove(uri)
    return len(objects)


def _remove_local(folder: Path, roots: Sequence[Path]) -> int:
    """Every file and link below ``folder``, then its directories once empty, reached from
    the root that holds it without following a link."""
    normal = os.path.normpath(folder)
    holding = [str(root) for root in roots if inside(normal, os.path.normpath(root))]
    if not holding:
        return 0
    root = Path(max(holding, key=len))
    relative = PurePosixPath(os.path.relpath(normal, root))
    if not relative.name or relative == PurePosixPath("."):
        return 0  # a root itself is never a job's folder
    removed = 0
    try:
        with untrusted.directory(root, relative) as fd:
            top = Path(f"/proc/self/fd/{fd}")
            for entry in untrusted.walk(top):
                if not stat.S_ISDIR(entry.stat.st_mode):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=entry.parent)
                        removed += 1
            # Bottom up; rmdir takes only an empty directory, never through a link.
            for _path, directories, _files, parent in os.fwalk(".", topdown=False, dir_fd=fd):
                for directory in directories:
                    with contextlib.suppress(OSError):
                        os.rmdir(directory, dir_fd=parent)
        with untrusted.directory(root, relative.parent) as parent, contextlib.suppress(OSError):
            os.rmdir(relative.name, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError, untrusted.Refused):
        pass  # nothing there, or a link where a directory was: nothing of the job's
    return removed
