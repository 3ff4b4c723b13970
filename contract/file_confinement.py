"""``file://`` objects used only where they really are: inside the directories the
server lets jobs use (``RUNYARD_FILE_ROOTS``), judged when they are opened, not when the
job was submitted.

The service checks a job's ``file://`` URIs when it is submitted; an instance's runtime
uses them later, with the server's rights. A link made or swapped in meanwhile (a channel's
directory replaced by a link to the server's home, a file in a dataset that points at a
secret) would take it elsewhere. Once ``confine`` is called (an instance's runtime calls it
with the roots its backend gave), ``contract.storage`` therefore opens each local path
first, following whatever links it holds, and uses it only if what was opened lies inside
a root (``/proc/self/fd``'s link to the opened file says where it really is), and from
then on only through that descriptor (``pinned``): a swap after the check changes nothing.
Directories it writes into are reached from a root it may write (not a read-only one: a
project's read-only grant) without following any link, and a tree it copies is walked
without following links (``contract.untrusted``).

Without ``confine`` (the service, which checks at submission, and tools), nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath

from contract import untrusted

# The roots as configured and with their own links resolved (a root may itself be a link,
# which is the operator's): every one, read from; those also written to. None until
# confine() is called.
_roots: tuple[str, ...] | None = None
_writable: tuple[str, ...] = ()


class OutsideRoots(Exception):
    """A local path leads outside the directories jobs may use."""


def confine(roots: Iterable[str], read_only: Iterable[str] = ()) -> None:
    """From now on, in this process, local objects are used only inside ``roots`` and
    ``read_only``, and written (made, replaced, removed) only inside ``roots``."""
    global _roots, _writable
    _writable = _forms(roots)
    _roots = tuple(sorted({*_writable, *_forms(read_only)}))


def _forms(roots: Iterable[str]) -> tuple[str, ...]:
    forms: set[str] = set()
    for root in roots:
        forms |= {os.path.normpath(root), os.path.realpath(root)}
    return tuple(sorted(forms))


def confined() -> bool:
    return _roots is not None


def inside(path: str, root: str) -> bool:
    """Whether the normalized absolute ``path`` is ``root`` or below it, folder by folder
    (/data2 is not inside /data). Strings, not pathlib: the service runs this for every
    URI of every job submitted, where pathlib's parsing cost more than the rest."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def _inside(path: str, *, writing: bool = False) -> bool:
    assert _roots is not None
    return any(inside(path, root) for root in (_writable if writing else _roots))


@contextlib.contextmanager
def pinned(path: Path, *, directory: bool = False, writing: bool = False) -> Iterator[Path]:
    """``path``, to be used through the name this yields, which stays the file or
    directory that was opened and checked, whatever is renamed meanwhile. Unconfined,
    ``path`` itself. OutsideRoots if it lies outside every root (``writing``: every root
    it may write)."""
    if _roots is None:
        yield path
        return
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_CLOEXEC
    fd = os.open(path, flags | (os.O_DIRECTORY if directory else 0))
    try:
        if not _inside(os.readlink(f"/proc/self/fd/{fd}"), writing=writing):
            where = "the directories jobs may write" if writing else "the directories jobs may use"
            raise OutsideRoots(f"{path} leads outside {where}")
        yield Path(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory_for_writing(path: Path) -> Iterator[Path]:
    """The directory ``path``, made where missing, to be written through the name this
    yields. Confined, it is reached from the root it lies in without following any link
    below that root (``contract.untrusted``). Unconfined, ``path`` itself, made."""
    if _roots is None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    normal = os.path.normpath(path)
    roots = [root for root in _writable if inside(normal, root)]
    if not roots:
        raise OutsideRoots(f"{path} is outside the directories jobs may write")
    root = max(roots, key=len)
    relative = PurePosixPath(os.path.relpath(normal, root))
    relative = PurePosixPath() if relative == PurePosixPath(".") else relative
    try:
        with untrusted.directory(Path(root), relative, create=True) as fd:
            yield Path(f"/proc/self/fd/{fd}")
    except untrusted.Refused as exc:
        raise OutsideRoots(f"{path}: {exc}: not followed") from exc


def copy_tree(source: Path, destination: Path, skip: Callable[[str], bool]) -> None:
    """``source``'s contents into ``destination``, links as links (as ``shutil.copytree``
    with ``symlinks=True`` copies them), FIFOs and devices left out, never into a link or a
    directory swapped meanwhile; names ``skip`` refuses left out with what is below them."""
    destination.mkdir(parents=True, exist_ok=True)
    for entry in untrusted.walk(source, lambda relative: not skip(relative.name)):
        target = destination.joinpath(*entry.relative.parts)
        mode = entry.stat.st_mode
        if stat.S_ISDIR(mode):
            target.mkdir(exist_ok=True)
        elif stat.S_ISLNK(mode):
            with contextlib.suppress(OSError):  # gone meanwhile, or already there
                os.symlink(entry.link(), target)
        elif stat.S_ISREG(mode):
            try:
                fd, opened = entry.open()
            except (FileNotFoundError, untrusted.Refused):
                continue  # gone, or swapped for something else, since it was listed
            with os.fdopen(fd, "rb") as data, open(target, "wb") as copy:
                shutil.copyfileobj(data, copy)
            os.chmod(target, stat.S_IMODE(opened.st_mode))
