"""Tarballs in and out, never writing outside the target directory.

Every member of an archive is checked with the standard library's ``data`` extraction
filter before anything is written, so a hostile archive (absolute paths, ``..``, links
pointing out, device files) is refused whole instead of half-extracted.

Checking is bounded work, whoever sent the archive: a member is refused on its header
(the size it declares, its name) before any of its bytes are read, and the stream is
refused as it is decompressed once it grows past what the archive may unpack to or
compresses far better than code does, so a small decompression bomb costs a few MiB of
reading, not gigabytes. The members are counted first, on their headers alone and
stepping over their bytes, so an archive of more members than allowed is refused at the
first one too many before any is checked: checking 200,000 members costs about 15 s of
CPU, counting them about 0.3 s.

Packing is deterministic (sorted names, fixed times and owners, no name or time in the
gzip header), so the same files always give the same bytes; and an archive's ``digest``
is of what it unpacks to, so bundles packed by other tools still compare by content.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import hashlib
import io
import lzma
import os
import re
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, cast

from contract import untrusted


class ArchiveError(Exception):
    """The archive is unreadable or would write outside its target."""


class ArchiveTooLarge(ArchiveError):
    """The archive would unpack to more bytes or members than allowed, or is a bomb."""


MAX_MEMBERS = 200_000
MAX_UNPACKED_BYTES = 4 * 1024**3
# Code and its data files compress about 3-10:1 and little real content passes 100:1,
# while a run of zeros compresses about 1000:1 with gzip (far more with bz2 or xz). An
# archive unpacking to more than this many times the packed bytes read so far is a bomb.
MAX_COMPRESSION_RATIO = 200
# The ratio is checked only past this many unpacked bytes: a tiny archive (a few empty or
# repetitive files) compresses far better than 200:1, and costs nothing to read anyway.
RATIO_FLOOR_BYTES = 1024**2
# What a member's headers and padding may take on top of the size it declares: its tar
# header, a pax or GNU long-name header holding a name and a link target of at most
# MAX_NAME_BYTES each, padding to the next 512-byte block. The stream may hold this much
# per member besides the unpacked bytes allowed, so a header can be no bomb either.
_HEADER_BYTES_PER_MEMBER = 16 * 1024
# Linux's PATH_MAX and NAME_MAX, and a depth no code tree needs: longer or deeper paths fail
# to unpack (ENAMETOOLONG, or a RecursionError creating the directories) on every instance.
MAX_NAME_BYTES = 4096
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 64
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
    archive: Path,
    destination: Path | None = None,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> list[str]:
    """Names of the regular files in ``archive``; raises ArchiveError if any member is
    unsafe, and ArchiveTooLarge if the whole would unpack to more than ``max_bytes`` or
    ``max_members`` members, or compresses more than ``MAX_COMPRESSION_RATIO`` to one."""
    return scan_archive(archive, destination, max_bytes, max_members).files


def scan_archive(
    archive: Path,
    destination: Path | None = None,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> Contents:
    """Check every member as ``check_archive`` does, and digest what it unpacks to."""
    tree = _Tree(
        archive,
        destination or Path(tempfile.gettempdir()) / "runyard-archive-check",
        max_bytes,
        max_members,
    )
    try:
        with open(archive, "rb") as raw:
            _scan(raw, tree)
    except OSError as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc
    return tree.contents()


def _scan(raw: IO[bytes], tree: _Tree) -> None:
    """Check every member of the archive open as ``raw`` into ``tree``, from its start."""
    archive = tree.archive
    try:
        raw.seek(0)
        _count_members(archive, raw, tree.max_bytes, tree.max_members)
        raw.seek(0)
        # Then read as a stream: each member's bytes are hashed as they go by, in one pass.
        # Decompressed here rather than by tarfile ("r|*"), which inflates a whole buffer
        # of input at once, however much it unpacks to.
        stream = _BoundedStream(archive, raw, max_bytes=tree.max_bytes)
        unpacked = cast(IO[bytes], stream)  # tarfile only calls read()
        with tarfile.open(fileobj=unpacked, mode="r|", bufsize=_STREAM_CHUNK) as tar:
            for member in tar:
                tree.add(member, tar.extractfile(member) if member.isfile() else None)
                stream.members = tree.members
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc


def _count_members(archive: Path, raw: IO[bytes], max_bytes: int, max_members: int) -> None:
    """Refuse ``archive`` at its member past ``max_members``, counted on the tar headers
    alone, the bytes after each stepped over as tarfile steps over them: nothing past the
    header of the member one too many is read. What this count cannot step over as
    tarfile would (a GNU sparse member, a pax header it cannot read, more bytes declared
    than may unpack) ends it without a verdict: the check that follows counts too, and
    refuses what it must."""
    stream = _BoundedStream(archive, raw, max_bytes)
    blocks = _Blocks(cast(IO[bytes], stream))
    members = declared = 0
    size_from_pax: int | None = None
    try:
        while (header := blocks.take(tarfile.BLOCKSIZE)) is not None and header != _END:
            kind, size = _kind_and_size(header)
            if kind in _PAX_TYPES:
                given = _pax_size(blocks, size, kind)
                if given is not None and size_from_pax is not None:
                    raise _Uncounted  # two sizes for one member: which wins is tarfile's
                size_from_pax = size_from_pax if given is None else given
                continue
            if kind in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                blocks.skip(_padded(size))
                continue
            members += 1
            stream.members = members
            if members > max_members:
                raise ArchiveTooLarge(f"{archive.name}: has more than {max_members} members")
            size = size if size_from_pax is None else size_from_pax
            size_from_pax = None
            # tarfile steps over the bytes of files and of kinds it does not know, only.
            if kind in tarfile.REGULAR_TYPES or kind not in tarfile.SUPPORTED_TYPES:
                declared += size
                if declared > max_bytes:
                    return  # refused on this member's header by the check that follows
                blocks.skip(_padded(size))
    except _Uncounted:
        return


class _Uncounted(Exception):
    """The count cannot go on as tarfile would read the archive."""


_END = bytes(tarfile.BLOCKSIZE)
_PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")


def _padded(size: int) -> int:
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _kind_and_size(header: bytes) -> tuple[bytes, int]:
    """A header's type and the size it declares. Its checksum is not verified (that would
    double the count's cost): tarfile stops reading at a block that is no header, where
    this count may go on, into bytes that are no archive; refused for too many members
    then, it was no archive of fewer either."""
    size, kind = _number(header[124:136]), header[156:157]
    if size < 0 or kind == tarfile.GNUTYPE_SPARSE:
        raise _Uncounted
    # Old V7 tar writes a directory as a file whose name ends in "/": it has no bytes.
    if kind == tarfile.AREGTYPE and header[:100].split(b"\0", 1)[0].endswith(b"/"):
        kind = tarfile.DIRTYPE
    return kind, size


def _number(field: bytes) -> int:
    """A header's number field as tarfile reads one: octal text, or GNU's base-256."""
    if field[0] in (0o200, 0o377):
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0o377 else value
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise _Uncounted from None


def _pax_size(blocks: _Blocks, size: int, kind: bytes) -> int | None:
    """The size the records of a pax header (``size`` bytes, next in ``blocks``) give the
    member after it; None if they give none. Records that say more than a count can
    follow (a GNU sparse map, a size for every member after a global header) or more than
    a member's headers may hold end the count."""
    if size > _HEADER_BYTES_PER_MEMBER or (data := blocks.take(_padded(size))) is None:
        raise _Uncounted
    records, found_size, position = data[:size], None, 0
    while found := _PAX_RECORD.match(records, position):
        length, keyword = int(found.group(1)), found.group(2)
        if length == 0 or keyword.startswith(b"GNU.sparse"):
            raise _Uncounted
        if keyword == b"size":
            value = records[found.end(2) + 1 : found.start(1) + length - 1]
            if kind == tarfile.XGLTYPE or not (value.isascii() and value.isdigit()):
                raise _Uncounted
            found_size = int(value)
        position += length
    return found_size


class _Blocks:
    """A tar stream read a chunk at a time, taken or stepped over in blocks."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._buffer = b""
        self._position = 0

    def take(self, count: int) -> bytes | None:
        """The next ``count`` bytes; None if the stream ends before them."""
        while len(self._buffer) - self._position < count:
            chunk = self._stream.read(_STREAM_CHUNK)
            if not chunk:
                return None
            self._buffer = self._buffer[self._position :] + chunk
            self._position = 0
        taken = self._buffer[self._position : self._position + count]
        self._position += count
        return taken

    def skip(self, count: int) -> None:
        """Step over ``count`` bytes."""
        held = len(self._buffer) - self._position
        if count <= held:
            self._position += count
            return
        count -= held
        self._buffer, self._position = b"", 0
        while count > 0:
            chunk = self._stream.read(min(count, _STREAM_CHUNK))
            if not chunk:
                raise _Uncounted  # the stream ends inside a member: tarfile says how
            count -= len(chunk)


class _Tree:
    """The members seen so far: each checked, and recorded as what it unpacks to."""

    def __init__(self, archive: Path, destination: Path, max_bytes: int, max_members: int) -> None:
        self.archive = archive
        self.destination = destination
        self.max_bytes = max_bytes
        self.max_members = max_members
        self.unpacked = 0
        self.members = 0
        self.files: list[str] = []
        # Normalised name -> "kind mode payload"; a later member of the same name replaces
        # an earlier one, as it does on extraction.
        self.records: dict[str, str] = {}
        # Every directory above a member so far (listed or not).
        self.directories: set[str] = set()

    def add(self, member: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        self._admit(member)
        _check_member(self.archive, member, self.destination)
        name = os.path.normpath(member.name)
        self._check_place(member, name)
        if member.islnk():
            self._add_hard_link(member, name)
        elif member.isfile():
            self.records[name] = f"file {member.mode & 0o7777:o} {_sha256(data)}"
            self.files.append(name)
        elif member.issym():
            self.records[name] = f"symlink {member.linkname}"
        elif member.isdir():
            self.records[name] = f"dir {member.mode & 0o7777:o}"

    def _admit(self, member: tarfile.TarInfo) -> None:
        # On the header alone, before any of the member's bytes are read: the size a
        # header declares is what unpacking it writes (and what reading it past costs).
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveTooLarge(f"{self.archive.name}: has more than {self.max_members} members")
        if self.unpacked + member.size > self.max_bytes:
            raise ArchiveTooLarge(
                f"{self.archive.name}: unpacks to more than {self.max_bytes} bytes "
                f"(reached at member {_shown(member.name)}, of {member.size} bytes)"
            )
        self.unpacked += member.size

    def _check_place(self, member: tarfile.TarInfo, name: str) -> None:
        """Refuse a member that cannot unpack where the members before it did: a directory
        and anything else of one name, or a member under a file. Unpacked, the second
        fails half-way (EISDIR, ENOTDIR) or leaves a file where the archive says a
        directory."""

        def refuse(why: str) -> ArchiveError:
            return ArchiveError(f"{self.archive.name}: refused member {_shown(member.name)}: {why}")

        parents = [str(parent) for parent in PurePosixPath(name).parents]
        for parent in parents:
            if self.records.get(parent, "").startswith("file "):
                raise refuse(f"it is under {_shown(parent)}, a file before it in the archive")
        before = self.records.get(name) or ("dir" if name in self.directories else None)
        if before is not None and before.startswith("dir") != member.isdir():
            earlier = _KINDS[before.split(" ", 1)[0]]
            raise refuse(f"{_kind(member)} where {earlier} of that name came before it")
        # Unpacking a member makes the directories above it, where none was listed.
        self.directories.update(parents)

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


# What each kind of record (``_Tree.records``) is, in a message.
_KINDS = {"dir": "a directory", "file": "a file", "symlink": "a symbolic link"}


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return _KINDS["dir"]
    return _KINDS["symlink"] if member.issym() else _KINDS["file"]


class _BoundedStream:
    """The tar stream inside ``raw``, decompressed as it is read and refused as soon as it
    grows past the unpacked bytes allowed (with room for headers, ``members`` having gone
    by) or past ``MAX_COMPRESSION_RATIO`` times the packed bytes read so far."""

    def __init__(self, archive: Path, raw: IO[bytes], max_bytes: int) -> None:
        self.archive = archive
        self.max_bytes = max_bytes
        self.members = 0
        self.unpacked = 0
        self._packed, self._stream = _decompressed(raw)

    def read(self, size: int = -1) -> bytes:
        # tarfile asks for its bufsize at a time, so a check runs every chunk, whether it
        # reads a member's bytes or a header it keeps whole (a pax or GNU long name).
        chunk = self._stream.read(size)
        self.unpacked += len(chunk)
        # Besides the members' bytes: the headers of those gone by and of the next, and
        # what tarfile has read ahead.
        headers = _HEADER_BYTES_PER_MEMBER * (self.members + 1) + _STREAM_CHUNK
        room = self.max_bytes + headers
        if self.unpacked > room:
            raise ArchiveTooLarge(
                f"{self.archive.name}: unpacks to more than {self.max_bytes} bytes"
            )
        if (
            self.unpacked > RATIO_FLOOR_BYTES
            and self.unpacked > MAX_COMPRESSION_RATIO * self._packed.count
        ):
            raise ArchiveTooLarge(
                f"{self.archive.name}: unpacks to more than {MAX_COMPRESSION_RATIO} times "
                f"its packed size ({self.unpacked} bytes from the first "
                f"{self._packed.count}): refused as a decompression bomb"
            )
        return chunk


class _Counted(io.RawIOBase):
    """``raw``, counting the bytes read from it."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        chunk = self._raw.read(size)
        self.count += len(chunk)
        return chunk


# How much tarfile asks of the stream at a time, and so how often the limits are checked.
_STREAM_CHUNK = 64 * 1024


def _decompressed(
    raw: IO[bytes],
) -> tuple[_Counted, _Counted | gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile]:
    """``raw`` counted, and what it decompresses to (itself for a plain tar), told apart
    as tarfile's own "r:*" does. Each reader decompresses a bounded amount per read,
    however well its input compresses."""
    start = raw.read(6)
    raw.seek(0)
    packed = _Counted(raw)
    if start.startswith(b"\x1f\x8b"):
        return packed, gzip.GzipFile(fileobj=packed, mode="rb")
    if start.startswith(b"BZh"):
        return packed, bz2.BZ2File(packed)
    if start.startswith((b"\xfd7zXZ\x00", b"\x5d\x00\x00\x80\x00")):  # .xz, legacy .lzma
        # LZMAFile reads any object with read(), as BZ2File does; typeshed asks for IO.
        return packed, lzma.LZMAFile(cast(IO[bytes], packed))
    return packed, packed


def _sha256(data: IO[bytes] | None) -> str:
    digest = hashlib.sha256()
    while data is not None and (chunk := data.read(_READ_CHUNK)):
        digest.update(chunk)
    return digest.hexdigest()


def _check_member(archive: Path, member: tarfile.TarInfo, destination: Path) -> None:
    def refuse(why: str) -> ArchiveError:
        return ArchiveError(f"{archive.name}: refused member {_shown(member.name)}: {why}")

    _check_path(member, refuse)
    # The data filter would quietly strip a leading "/"; an archive that has one was not
    # made for this purpose, so it is refused whole.
    if member.name.startswith(("/", "\\")) or ".." in PurePosixPath(member.name).parts:
        raise refuse("path leaves the target")
    # Links may only point down: with no absolute target and no "..", no chain of links
    # can resolve above the directory holding it, however the path is resolved.
    if member.issym() or member.islnk():
        target = PurePosixPath(member.linkname)
        if _byte_length(member.linkname) > MAX_NAME_BYTES:
            raise refuse(f"link target longer than {MAX_NAME_BYTES} bytes")
        if target.is_absolute() or ".." in target.parts:
            raise refuse(f"link to {member.linkname!r} points outside its directory")
    try:
        tarfile.data_filter(member, str(destination))
    except tarfile.FilterError as exc:
        raise refuse(str(exc)) from exc


def _check_path(member: tarfile.TarInfo, refuse: Callable[[str], ArchiveError]) -> None:
    """Refuse a name no file system takes: extracting it would fail half-way, on every
    instance, instead of the archive being refused whole here."""
    # tarfile strips a directory's trailing "/", so "./" (as `tar -C dir .` writes the top
    # directory) arrives as "."; anything else with no name would overwrite the target.
    if not member.name or (os.path.normpath(member.name) == "." and not member.isdir()):
        raise refuse("empty name")
    if _byte_length(member.name) > MAX_NAME_BYTES:
        raise refuse(f"name longer than {MAX_NAME_BYTES} bytes")
    parts = PurePosixPath(member.name).parts
    if len(parts) > MAX_DEPTH:
        raise refuse(f"path deeper than {MAX_DEPTH} directories")
    if any(_byte_length(part) > MAX_COMPONENT_BYTES for part in parts):
        raise refuse(f"a directory or file name longer than {MAX_COMPONENT_BYTES} bytes")


def _byte_length(name: str) -> int:
    # tarfile decodes names it cannot read as UTF-8 with surrogateescape; this gives back
    # the bytes the file system would get.
    return len(name.encode(errors="surrogateescape"))


def _shown(name: str) -> str:
    """``name`` quoted for a message, cut short when it is too long to read."""
    if len(name) <= 200:
        return repr(name)
    return f"{name[:200]!r}... ({_byte_length(name)} bytes)"


def extract(archive: Path, destination: Path, max_bytes: int = MAX_UNPACKED_BYTES) -> None:
    with open(archive, "rb") as raw:
        extract_open(raw, archive, destination, max_bytes)


def extract_open(
    raw: IO[bytes], archive: Path, destination: Path, max_bytes: int = MAX_UNPACKED_BYTES
) -> None:
    """As ``extract``, for an archive already open as ``raw`` (``archive`` names it in
    messages): it is checked and unpacked from that file alone, never opened again by its
    name, which may have been swapped meanwhile."""
    destination.mkdir(parents=True, exist_ok=True)
    _scan(raw, _Tree(archive, destination, max_bytes, MAX_MEMBERS))
    raw.seek(0)
    try:
        with tarfile.open(fileobj=raw, mode="r:*") as tar:
            tar.extractall(destination, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise ArchiveError(f"{archive.name}: not a readable tar archive ({exc})") from exc


def make_tarball(source_dir: Path, target: Path, exclude: frozenset[str] = frozenset()) -> Path:
    """Write ``source_dir``'s contents (not the directory itself) to a .tar.gz at ``target``,
    leaving out files and directories whose name is in ``exclude``. The same files give
    the same bytes, whenever and wherever they are packed.

    The tree may be another user's (a job's model directory, packed by its root runtime
    while the job's processes may still write it): nothing below ``source_dir`` is followed.
    A symbolic link is stored as a link, as tar stores one; a directory is entered only if
    it is still the one listed, and a file's bytes are read only from what was opened as a
    regular file (``contract.untrusted``), never from a link's target, a FIFO or a device.
    """

    def keep(relative: PurePosixPath) -> bool:
        return relative.name not in exclude

    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(target, "wb") as raw,
        # No file name and time 0 ("none") in the gzip header; tarfile's own "w:gz" writes both.
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        # In the order tar.add would add them: sorted names, each directory before its own.
        for entry in untrusted.walk(source_dir, keep) if source_dir.exists() else []:
            _add(tar, entry)
    return target


def _add(tar: tarfile.TarFile, entry: untrusted.Entry) -> None:
    found = entry.stat
    kind = _MEMBER_TYPES.get(stat.S_IFMT(found.st_mode))
    if kind is None:
        return  # a socket: tar leaves it out
    try:
        if kind == tarfile.REGTYPE:
            fd, opened = entry.open()
            # A second name of a hard-linked file is stored as a file of its own, so that
            # it always unpacks whichever names are excluded; its bytes are those opened.
            with os.fdopen(fd, "rb") as data:
                tar.addfile(_member(entry.relative, opened, kind), data)
            return
        linkname = entry.link() if kind == tarfile.SYMTYPE else ""
    except (FileNotFoundError, untrusted.Refused):
        return  # gone, or swapped for something else, since it was listed: left out
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return  # no longer a link (readlink's EINVAL): left out as well
    tar.addfile(_member(entry.relative, found, kind, linkname))


# What tar.add stores of each kind of file.
_MEMBER_TYPES = {
    stat.S_IFREG: tarfile.REGTYPE,
    stat.S_IFDIR: tarfile.DIRTYPE,
    stat.S_IFLNK: tarfile.SYMTYPE,
    stat.S_IFIFO: tarfile.FIFOTYPE,
    stat.S_IFCHR: tarfile.CHRTYPE,
    stat.S_IFBLK: tarfile.BLKTYPE,
}


def _member(
    relative: PurePosixPath, found: os.stat_result, kind: bytes, linkname: str = ""
) -> tarfile.TarInfo:
    """The member tar.add would make of ``found``, normalised: archives must not carry the
    packer's user names or ids, nor anything that changes when the files are touched or
    checked out again; only content, kind, and whether a file is executable (as git keeps
    it)."""
    info = tarfile.TarInfo(relative.as_posix())
    info.type, info.linkname, info.mtime = kind, linkname, FIXED_MTIME
    info.mode = stat.S_IMODE(found.st_mode)
    if kind == tarfile.REGTYPE:
        info.size = found.st_size
        info.mode = 0o755 if info.mode & stat.S_IXUSR else 0o644
    elif kind == tarfile.DIRTYPE:
        info.mode = 0o755
    elif kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = os.major(found.st_rdev), os.minor(found.st_rdev)
    return info
