"""Tarballs in and out, never writing outside the target directory.

Every member of an archive is checked with the standard library's ``data`` extraction
filter before anything is written, so a hostile archive (absolute paths, ``..``, links
pointing out, device files) is refused whole instead of half-extracted.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path, PurePosixPath


class ArchiveError(Exception):
    """The archive is unreadable or would write outside its target."""


def check_archive(archive: Path, destination: Path | None = None) -> list[str]:
    """Names of the regular files in ``archive``; raises ArchiveError if any member is unsafe."""
    destination = destination or Path(tempfile.gettempdir()) / "runyard-archive-check"
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc
    files = []
    for member in members:
        # The data filter would quietly strip a leading "/"; an archive that has one was
        # not made for this purpose, so it is refused whole.
        if member.name.startswith(("/", "\\")) or ".." in PurePosixPath(member.name).parts:
            raise ArchiveError(
                f"{archive.name}: refused member {member.name!r}: path leaves the target"
            )
        try:
            tarfile.data_filter(member, str(destination))
        except tarfile.FilterError as exc:
            raise ArchiveError(f"{archive.name}: refused member {member.name!r}: {exc}") from exc
        if member.isfile():
            files.append(os.path.normpath(member.name))
    return files


def extract(archive: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    check_archive(archive, destination)
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(destination, filter="data")


def make_tarball(source_dir: Path, target: Path, exclude: frozenset[str] = frozenset()) -> Path:
    """Write ``source_dir``'s contents (not the directory itself) to a .tar.gz at ``target``,
    leaving out files and directories whose name is in ``exclude``."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if PurePosixPath(info.name).name in exclude:
            return None
        # Archives must not carry the packer's user names or ids.
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for entry in sorted(source_dir.iterdir()) if source_dir.exists() else []:
            tar.add(entry, arcname=entry.name, filter=keep)
    return target
