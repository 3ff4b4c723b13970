"""Tarballs in and out, never writing outside the target directory.

Every member of an archive is checked with the standard library's ``data`` extraction
filter before anything is written, so a hostile archive (absolute paths, ``..``, links
pointing out, device files) is refused whole instead of half-extracted.

Packing is deterministic (sorted names, fixed times and owners, no name or time in the
gzip header), so the same files always give the same bytes; and an archive's ``digest``
is of what it unpacks to, so bundles packed by other tools still compare by content.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO


class ArchiveError(Exception):
    """The archive is unreadable or would write outside its target."""


MAX_MEMBERS = 200_000
MAX_UNPACKED_BYTES = 4 * 1024**3
# Every packed member's time: 2000-01-01 UTC. Not 0: tools that zip the unpacked code
# (building a wheel of a packaged entry point) refuse times before 1980.
FIXED_MTIME = 946_684_800
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Contents:
    """What an archive that passed the checks holds."""

    files: list[str]  # regular files (hard links included), normalised, in archive order
    digest: str  # sha256 of the tree it unpacks to: names, kinds, modes, links, bytes


def check_archive(
    archive: Path, destination: Path | None = None, max_bytes: int = MAX_UNPACKED_BYTES
) -> list[str]:
    """Names of the regular files in ``archive``; raises ArchiveError if any member is
    unsafe or the whole would unpack to more than ``max_bytes``."""
    return scan_archive(archive, destination, max_bytes).files


def scan_archive(
    archive: Path, destination: Path | None = None, max_bytes: int = MAX_UNPACKED_BYTES
) -> Contents:
    """Check every member as ``check_archive`` does, and digest what it unpacks to."""
    tree = _Tree(archive, destination or Path(tempfile.gettempdir()) / "runyard-archive-check")
    try:
        # Read as a stream: each member's bytes are hashed as they go by, in one pass.
        with open(archive, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
            for count, member in enumerate(tar, start=1):
                tree.add(member, tar.extractfile(member) if member.isfile() else None)
                if tree.unpacked > max_bytes or count > MAX_MEMBERS:
                    raise ArchiveError(
                        f"{archive.name}: unpacks to more than {max_bytes} bytes "
                        f"or {MAX_MEMBERS} members"
                    )
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc
    return tree.contents()


class _Tree:
    """The members seen so far: each checked, and recorded as what it unpacks to."""

    def __init__(self, archive: Path, destination: Path) -> None:
        self.archive = archive
        self.destination = destination
        self.unpacked = 0
        self.files: list[str] = []
        # Normalised name -> "kind mode payload"; a later member of the same name replaces
        # an earlier one, as it does on extraction.
        self.records: dict[str, str] = {}

    def add(self, member: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        _check_member(self.archive, member, self.destination)
        name = os.path.normpath(member.name)
        self.unpacked += member.size
        if member.islnk():
            self._add_hard_link(member, name)
        elif member.isfile():
            self.records[name] = f"file {member.mode & 0o7777:o} {_sha256(data)}"
            self.files.append(name)
        elif member.issym():
            self.records[name] = f"symlink {member.linkname}"
        elif member.isdir():
            self.records[name] = f"dir {member.mode & 0o7777:o}"

    def _add_hard_link(self, member: tarfile.TarInfo, name: str) -> None:
        # tarfile links to a regular file archived before the link; anything else fails
        # with a KeyError, and only after the members before it have been written.
        target = self.records.get(os.path.normpath(member.linkname), "")
        if not target.startswith("file "):
            raise ArchiveError(
                f"{self.archive.name}: refused member {member.name!r}: hard link to "
                f"{member.linkname!r}, which is not a file before it in the archive"
            )
        self.records[name] = target
        self.files.append(name)

    def contents(self) -> Contents:
        digest = hashlib.sha256()
        for name in sorted(self.records):
            digest.update(f"{name}\0{self.records[name]}\n".encode(errors="surrogateescape"))
        return Contents(files=self.files, digest=digest.hexdigest())


def _sha256(data: IO[bytes] | None) -> str:
    digest = hashlib.sha256()
    while data is not None and (chunk := data.read(_READ_CHUNK)):
        digest.update(chunk)
    return digest.hexdigest()


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
    leaving out files and directories whose name is in ``exclude``. The same files give
    the same bytes, whenever and wherever they are packed."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if PurePosixPath(info.name).name in exclude:
            return None
        return _normalised(info, source_dir / info.name)

    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(target, "wb") as raw,
        # No file name and time 0 ("none") in the gzip header; tarfile's own "w:gz" writes both.
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        # tar.add recurses into directories in sorted order.
        for entry in sorted(source_dir.iterdir()) if source_dir.exists() else []:
            tar.add(entry, arcname=entry.name, filter=keep)
    return target


def _normalised(info: tarfile.TarInfo, path: Path) -> tarfile.TarInfo:
    # Archives must not carry the packer's user names or ids, nor anything that changes
    # when the files are touched or checked out again: only content, kind, and whether a
    # file is executable (as git keeps it).
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = FIXED_MTIME
    if info.islnk():
        # tar makes a second name of a hard-linked file a link to the first, which may be
        # excluded; stored as a file of its own, it always unpacks.
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
    if info.isdir() or (info.isfile() and info.mode & stat.S_IXUSR):
        info.mode = 0o755
    elif info.isfile():
        info.mode = 0o644
    return info
