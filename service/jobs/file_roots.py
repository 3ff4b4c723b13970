"""Where a job's ``file://`` URIs may point: inside the directories the server's
administrator allows (``RUNYARD_FILE_ROOTS``, and the artifact root).

The server reads a job's source to check it, and its instances read the channels and
write the model and checkpoints with the server's rights (on the local backend, as the
server's user): a URI elsewhere would let a job read or write whatever the server can.

A URI is judged in two steps. First by its path alone, ``..`` and percent-escapes
resolved as ``contract.storage`` resolves them: a path outside every root is refused
with one message, whatever is or is not there, so a refusal tells nothing of the server's
files. Only a path inside a root is then looked at on disk: its symbolic links resolved,
it must still be inside one (a link inside a root to a place outside is refused too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from contract import storage
from contract.file_confinement import inside
from contract.problems import Problem
from contract.spec import JobSpec
from service.kit import resolved_paths


def problems(spec: JobSpec, roots: Sequence[Path]) -> list[Problem]:
    """The first of the job's file:// URIs that leads outside ``roots``, as a problem."""
    forms = _forms(roots)  # resolved once a request: each resolution walks the disk
    for loc, uri in spec.storage_uris().items():
        problem = _problem(uri, forms)
        if problem is not None:
            return [Problem(loc, problem)]
    return []


def uri_problem(uri: str, roots: Sequence[Path]) -> str | None:
    """Why ``uri`` may not be used (a file:// URI outside ``roots``), or None."""
    return _problem(uri, _forms(roots))


def _problem(uri: str, forms: set[str]) -> str | None:
    try:
        if storage.scheme(uri) != "file":
            return None
        path = storage.local_path(uri)
    except storage.StorageError:
        return None  # malformed or unsupported: the checks after this one say why
    if "\x00" in str(path):
        return f"{uri}: a file name cannot hold NUL (%00)"
    # The roots themselves are not named: they are the server's paths (its home among
    # them), which its administrator knows and a member need not.
    outside = (
        f"{uri}: outside the directories this server lets jobs use "
        "(its administrator names them in RUNYARD_FILE_ROOTS)"
    )
    if not _inside(os.path.normpath(path), forms):
        return outside
    if not _inside(resolved_paths.realpath(path), forms):
        return f"{uri}: leads outside the directories this server lets jobs use, through a link"
    return None


def _forms(roots: Iterable[Path]) -> set[str]:
    # A root as configured and with its own links resolved: /data may be a link to
    # /mnt/data, and a path is then inside it written either way.
    return {form for root in roots for form in root_forms(root)}


def root_forms(root: Path) -> tuple[str, str]:
    """A root's path as written, then with its links resolved (a walk of the disk)."""
    return os.path.normpath(root), resolved_paths.realpath(root)


def _inside(path: str, roots: set[str]) -> bool:
    return any(inside(path, root) for root in roots)
