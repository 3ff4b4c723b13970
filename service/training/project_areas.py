"""Where the default project's jobs may read and write inside the artifact root.

The artifact root holds every project's models and checkpoints. Inside it, a job of the
project ``default`` (the one every job belonged to before projects) keeps its outputs at
the root, as before; a job of any other project under ``projects/<project>/``
(``service.grants.places.output_root``). A default job may name any place inside the
artifact root but the other projects' areas (and the root itself, which holds them);
the other projects are held to their own places by ``service.grants.checks``. URIs
outside the artifact root are the file roots' concern (``file_roots``) or the job's own
buckets.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import PurePosixPath

from contract import storage
from contract.file_confinement import inside
from contract.problems import Problem
from contract.spec import JobSpec
from service.auth.models import DEFAULT_PROJECT
from service.grants.places import PROJECTS_FOLDER, output_root
from service.jobs.file_roots import root_forms
from service.kit import resolved_paths
from service.sources.service import SOURCES_FOLDER


def problems(spec: JobSpec, job_name: str, artifact_root: str, project: str) -> list[Problem]:
    """The first of the job's URIs inside another project's part of the artifact root.
    Its outputs go below ``output_path/<job name>``: that is where it writes."""
    own = output_root(artifact_root, project)
    tops = _root_forms(artifact_root)
    for use in spec.storage_uses(job_name):
        below = _below(use.used, artifact_root, tops)
        if below is None or _allowed(below, project, reading=not use.writing):
            continue
        return [
            Problem(
                use.loc,
                f"{use.given}: inside the artifact root, a job of project {project!r} may use "
                f"only {own} (and read uploaded sources)",
            )
        ]
    return []


def _allowed(below: PurePosixPath, project: str, *, reading: bool) -> bool:
    parts = below.parts
    if parts[:1] == (SOURCES_FOLDER,):
        return reading
    if project == DEFAULT_PROJECT:
        # Not the root itself, which holds every project's area.
        return bool(parts) and parts[0] != PROJECTS_FOLDER
    return parts[:2] == (PROJECTS_FOLDER, project)


def _root_forms(root: str) -> tuple[str, ...]:
    """A file:// root's path as written and with its links resolved (once a check: each
    resolution walks the disk); nothing for an object store's."""
    try:
        if storage.scheme(root) != "file":
            return ()
        top = storage.local_path(root)
    except storage.StorageError:
        return ()
    return root_forms(top)


def _below(uri: str, root: str, tops: tuple[str, ...]) -> PurePosixPath | None:
    """``uri``'s path below ``root`` (empty for the root itself), or None if it is not
    inside it. ``..`` is resolved as the storage resolves it, and for files, links too;
    ``tops``: the root's ``_root_forms``."""
    try:
        if storage.scheme(uri) != storage.scheme(root):
            return None
        if storage.scheme(uri) == "file":
            path = storage.local_path(uri)
            for form in (os.path.normpath(path), resolved_paths.realpath(path)):
                for top in tops:
                    if inside(form, top):
                        # The rest of the path below the root (a string cut, not
                        # pathlib's relative_to: this runs for every URI of every job).
                        return PurePosixPath(form[len(top) :].lstrip("/"))
            return None
    except storage.StorageError:
        return None  # malformed: the checks after this one say why
    # Object stores: keys are names, compared as written (no ".." there), folder by folder.
    key = posixpath.normpath(uri.removeprefix("s3://"))
    base = posixpath.normpath(root.removeprefix("s3://"))
    if key == base or key.startswith(base + "/"):
        return PurePosixPath(key).relative_to(base)
    return None
