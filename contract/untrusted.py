"""Reading and writing in a directory tree that a less trusted user writes.

An instance's runtime runs as root; the job's processes run as a user of the job's own,
who owns the job's output, model and checkpoint directories. Whatever the runtime reads or
writes there may have been put in its way: a symbolic link to a file of the machine's (a
secret, a system file), a FIFO no one writes, a file too large to hold, a directory
swapped for a link while it is walked. Below a ``root`` of the caller's own (followed if
it is a link: the caller chose it), this module therefore

- opens every component itself, relative to the directory above it, never through a link
  (``O_NOFOLLOW``): a link anywhere on the way is refused, not followed;
- opens a file without waiting (``O_NONBLOCK``) and uses it only if ``fstat`` says it is a
  regular file, so a FIFO or a device is never read;
- reads only as much as the caller asks for (``read``); and
- writes a file by creating a new one under a name of its own, then renaming it into
  place, which replaces whatever was there (a link included) instead of writing through.

Whatever is used is checked as it was opened (``fstat``), not only as its path looked
before: a name swapped between the two is caught.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# A directory on the way, reached without following a link. O_PATH where the system has
# it: passing through a directory takes no right to list it (an agent of the job's passes
# through the runtime's own directory, which it may not list).
_THROUGH = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A directory to list, reached the same way.
_LISTED = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file: never through a link, never waiting (an open(2) of a FIFO waits for the other end).
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# How deep ``walk`` goes: far deeper than any code, model or checkpoint tree, and a bound on
# the descriptors it holds open (one per level) however deep a tree the job makes.
MAX_DEPTH = 256
_CHUNK = 1 << 20


class Refused(OSError):
    """What is at a path below the root is not what may be used there: a link, or not a
    regular file (or, on the way to one, not a directory)."""

    def __init__(self, relative: PurePosixPath, found: str, wanted: str) -> None:
        super().__init__(f"{relative} is {found}, not {wanted}")
        self.relative = relative
        self.found = found


def kind(mode: int) -> str:
    """What a file of ``mode`` is, for a message."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def names(relative: str | PurePosixPath) -> tuple[str, ...]:
    """The components of ``relative``; ValueError if it is absolute or climbs (``..``)."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{str(relative)!r} is not a path below a directory")
    return path.parts


@contextlib.contextmanager
def directory(
    root: Path, relative: str | PurePosixPath = "", *, create: bool = False
) -> Iterator[int]:
    """A descriptor of the directory ``relative`` below ``root``, reached without following
    a link; with ``create``, each missing directory on the way is made (``root`` too)."""
    parts = names(relative)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, _THROUGH & ~os.O_NOFOLLOW)
    try:
        for depth, name in enumerate(parts, start=1):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            try:
                below = os.open(name, _THROUGH, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                raise _refusal(fd, name, PurePosixPath(*parts[:depth]), "a directory") from exc
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def open_file(root: Path, relative: str | PurePosixPath) -> tuple[int, os.stat_result]:
    """The regular file ``relative`` below ``root``, open for reading, and its ``fstat``;
    the caller closes it. Refused for a link anywhere on the way, or for anything but a
    regular file there; FileNotFoundError if there is nothing."""
    parts = names(relative)
    if not parts:
        raise ValueError("a file needs a name")
    *above, name = parts
    with directory(root, PurePosixPath(*above)) as parent:
        return open_in(parent, name, PurePosixPath(relative))


def open_in(parent: int, name: str, relative: PurePosixPath) -> tuple[int, os.stat_result]:
    """As ``open_file``, for ``name`` in the directory open as ``parent`` (``relative``
    names it in messages)."""
    # Looked at first, so that nothing but a regular file (a device, say) is ever opened;
    # what was opened is looked at again, since it may have been swapped meanwhile.
    found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISREG(found.st_mode):
        raise Refused(relative, kind(found.st_mode), "a regular file")
    try:
        fd = os.open(name, os.O_RDONLY | _FILE, dir_fd=parent)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise Refused(relative, "a symbolic link", "a regular file") from exc
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise Refused(relative, kind(opened.st_mode), "a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


def read(fd: int, limit: int, offset: int = 0) -> bytes:
    """At most ``limit`` bytes of the open file, from ``offset``."""
    chunks: list[bytes] = []
    done = 0
    while done < limit:
        chunk = os.pread(fd, min(_CHUNK, limit - done), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def read_start(root: Path, relative: str | PurePosixPath, limit: int) -> bytes:
    """The first ``limit`` bytes (at most) of the regular file ``relative`` below ``root``."""
    fd, _found = open_file(root, relative)
    try:
        return read(fd, limit)
    finally:
        os.close(fd)


def write_file(
    root: Path,
    relative: str | PurePosixPath,
    data: bytes,
    mode: int = 0o666,
    owner: int | None = None,
) -> None:
    """Put a new file holding ``data`` at ``relative`` below ``root`` (its directories made
    where missing), in place of whatever was there: a link there is replaced, never written
    through. ``mode`` is masked by the umask, as open(2) does; ``owner``, where given, is
    the user (and group) the file has before it is put in place."""
    *above, name = names(relative)

    def fill(fd: int) -> None:
        _write_all(fd, data)
        if owner is not None:
            os.fchown(fd, owner, owner)

    with directory(root, PurePosixPath(*above), create=True) as parent:
        _replace(parent, name, fill, mode)


def place(source: Path, root: Path, relative: str | PurePosixPath) -> None:
    """Move the file ``source`` (the caller's own) to ``relative`` below ``root``, in place of
    whatever was there, as ``write_file`` does; copied where it is on another file system."""
    *above, name = names(relative)
    with directory(root, PurePosixPath(*above), create=True) as parent:
        try:
            os.rename(source, name, dst_dir_fd=parent)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        with open(source, "rb") as data:

            def fill(fd: int) -> None:
                while chunk := data.read(_CHUNK):
                    _write_all(fd, chunk)

            _replace(parent, name, fill, 0o666)
        os.unlink(source)


def append(root: Path, relative: str | PurePosixPath, data: bytes) -> None:
    """Add ``data`` to the end of the regular file ``relative`` below ``root``, made if
    missing; refused (never written through) where a link or anything else is there."""
    *above, name = names(relative)
    with directory(root, PurePosixPath(*above), create=True) as parent:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FILE, 0o666, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # ENXIO: a FIFO no one reads
                raise _refusal(parent, name, PurePosixPath(relative), "a regular file") from exc
            raise
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                raise Refused(PurePosixPath(relative), kind(found.st_mode), "a regular file")
            _write_all(fd, data)
        finally:
            os.close(fd)


def _replace(parent: int, name: str, fill: Callable[[int], None], mode: int) -> None:
    # A name of its own that no one else can have made (O_EXCL says so), filled, then
    # renamed over ``name``: rename(2) replaces a link, it does not follow one.
    temporary = f".runyard-{secrets.token_hex(8)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE, mode, dir_fd=parent)
    try:
        try:
            fill(fd)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=parent)
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refusal(parent: int, name: str, relative: PurePosixPath, wanted: str) -> OSError:
    """Why ``name`` in ``parent`` could not be opened as ``wanted``."""
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError as exc:
        return exc  # gone meanwhile
    return Refused(relative, kind(found.st_mode), wanted)


# -- walking -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One entry of a tree being walked. ``parent`` is the descriptor of the directory
    holding it, open until the walk moves on."""

    relative: PurePosixPath
    parent: int
    name: str
    stat: os.stat_result  # of the entry itself: a link is a link

    def open(self) -> tuple[int, os.stat_result]:
        """The entry as a regular file, as ``open_file`` opens one."""
        return open_in(self.parent, self.name, self.relative)

    def link(self) -> str:
        """Where the entry, a symbolic link, points."""
        return os.readlink(self.name, dir_fd=self.parent)


def walk(root: Path, keep: Callable[[PurePosixPath], bool] | None = None) -> Iterator[Entry]:
    """Every entry below ``root``, depth first as tar lists them: each directory's entries
    in name order, each directory just before what it holds. Never into a link, nor into a
    directory swapped for another since it was listed, nor below ``MAX_DEPTH``; an entry
    that ``keep`` refuses is left out with all below it, as is one that vanishes."""
    top = os.open(root, _LISTED & ~os.O_NOFOLLOW)
    # (descriptor, its path below root, its names not yet seen)
    stack = [(top, PurePosixPath(), iter(_listed(top)))]
    try:
        while stack:
            fd, relative, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            path = relative / name
            if keep is not None and not keep(path):
                continue
            try:
                found = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield Entry(path, fd, name, found)
            if stat.S_ISDIR(found.st_mode) and len(stack) < MAX_DEPTH:
                below = _enter(fd, name, found)
                if below is not None:
                    stack.append((below, path, iter(_listed(below))))
    finally:
        for fd, _relative, _pending in stack:
            os.close(fd)


def _listed(fd: int) -> list[str]:
    try:
        return sorted(os.listdir(fd))
    except BaseException:
        os.close(fd)
        raise


def _enter(parent: int, name: str, listed: os.stat_result) -> int | None:
    """The directory ``name`` open, if it is still the one listed."""
    try:
        fd = os.open(name, _LISTED, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError):
        return None  # gone, or swapped for a link or a file
    if os.path.samestat(listed, os.fstat(fd)):
        return fd
    os.close(fd)
    return None
