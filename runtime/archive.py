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


MAX_MEMBERS = 200_000
MAX_UNPACKED_BYTES = 4 * 1024**3


def check_archive(
    archive: Path, destination: Path | None = None, max_bytes: int = MAX_UNPACKED_BYTES
) -> list[str]:
    """Names of the regular files in ``archive``; raises ArchiveError if any member is
    unsafe or the whole would unpack to more than ``max_bytes``."""
    destination = destination or Path(tempfile.gettempdir()) / "runyard-archive-check"
    files: list[str] = []
    total = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for count, member in enumerate(tar, start=1):
                _check_member(archive, member, destination)
                total += member.size
                if total > max_bytes or count > MAX_MEMBERS:
                    raise ArchiveError(
                        f"{archive.name}: unpacks to more than {max_bytes} bytes "
                        f"or {MAX_MEMBERS} members"
                    )
                if member.isfile():
                    files.append(os.path.normpath(member.name))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc
    return files


def _check_member(archive: Path, member: tarfile.TarInfo, destination: Path) -> None:
    def refuse(why: str) -> ArchiveError:
        return ArchiveError(f"{archive.name}: refused member {member.name!r}: {why}")

    # The data filter would quietly strip a leading "/"; an archive that has one was not
    # made for this purpose, so it is refused whole.
    if member.name.startswith(("/", "\\")) or ".." in PurePosixPath(member.name).parts:
        raise refuse("path leaves the target")
    # Links may only point down: with no absolute target and no "..", no chain of links
    # can resolve above the directory holding it, however the path is resolved.
    if member.issym() or member.islnk():
        target = PurePosixPath(member.linkname)
        if target.is_absolute() or ".." in target.parts:
            raise refuse(f"link to {member.linkname!r} points outside its directory")
    try:
        tarfile.data_filter(member, str(destination))
    except tarfile.FilterError as exc:
        raise refuse(str(exc)) from exc


def extract(archive: Path, destination: Path, max_bytes: int = MAX_UNPACKED_BYTES) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    check_archive(archive, destination, max_bytes)
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
