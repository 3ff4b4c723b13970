"""When a file under a directory tree is complete, and how to copy it without tearing.

A watcher announces files that became complete: closed after writing or renamed into
place, as Linux inotify reports them; where inotify is unavailable, unchanged in size and
mtime over two polls. ``copy_whole`` then copies a file only while no process has it open
for writing, and keeps the copy only if none opened it for writing meanwhile: on Linux a
read lease says both (the kernel refuses one while a writer has the file open, and breaks
it when a writer opens the file); elsewhere stat before and after the copy must agree.

The tree is the job's, copied by its root runtime: what is walked and read below the root
is never reached through a link, and only a regular file's bytes are read
(``contract.untrusted``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contract import untrusted
from runtime.linux import inotify

# A file's version as stat sees it: size, mtime, ctime (a rename sets it), inode.
StatKey = tuple[int, int, int, int]

POLL_INTERVAL = 1.0
# A file already in a new directory when its watch was added, where no lease can say
# whether it is still being written: complete once no write showed up for this long.
QUIET_PERIOD = 1.0
COPY_CHUNK = 4 * 1024 * 1024

_WATCH_MASK = (
    inotify.IN_MODIFY
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ONLYDIR
    | inotify.IN_DONT_FOLLOW
)
# Reading never blocks (a FIFO put in a file's place) nor follows a symbolic link.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Ready:
    """A file the watcher saw become complete; ``version`` lets the watcher tell later
    whether the file was touched since."""

    path: Path
    version: object
    # Complete because it stopped changing, not because it was closed or renamed: it may
    # be a version already stored (after lost events, say), worth no second upload.
    settled: bool = False


class Watcher(Protocol):
    description: str

    def changes(self, timeout: float) -> list[Ready]:
        """Files that became complete since the last call, in that order; waits up to
        ``timeout`` seconds when there are none yet."""
        ...

    def unchanged(self, ready: Ready) -> bool:
        """Whether the file is still the version ``ready`` announced."""
        ...

    def close(self) -> None: ...


class PollingWatcher:
    """Walks the tree every ``interval`` seconds; a file is complete once its size and
    mtime held over two polls (and, where leases tell, no process has it open for
    writing). ``announced`` is what needs no announcing (what is stored already, as it
    is); by default, the files there when it starts."""

    def __init__(
        self,
        root: Path,
        interval: float = POLL_INTERVAL,
        reason: str = "",
        *,
        announced: dict[Path, StatKey] | None = None,
    ) -> None:
        self.root = root
        self.interval = interval
        self.description = f"polling every {interval:g} s" + (f": {reason}" if reason else "")
        self._previous = scan(root)
        self._announced = dict(self._previous if announced is None else announced)
        self._next_poll = time.monotonic() + interval

    def changes(self, timeout: float) -> list[Ready]:
        wait = self._next_poll - time.monotonic()
        if wait > timeout:
            time.sleep(timeout)
            return []
        time.sleep(max(0.0, wait))
        self._next_poll = time.monotonic() + self.interval
        current = scan(self.root)
        stable = {
            path: key
            for path, key in current.items()
            if self._previous.get(path) == key
            and self._announced.get(path) != key
            # Held open by a writer that paused: its next poll after the close will do.
            and open_for_writing(path) is not True
        }
        self._announced.update(stable)
        self._previous = current
        return [Ready(path, key, settled=True) for path, key in stable.items()]

    def unchanged(self, ready: Ready) -> bool:
        return stat_key(ready.path) == ready.version

    def close(self) -> None:
        pass


class InotifyWatcher:
    """Linux inotify on every directory of the tree, new ones included.

    A close after writing or a rename into place makes a file complete (a directory
    renamed into place makes all of its files complete); any write after that (a rewrite
    in place starts with a truncation, which counts) makes it incomplete again until its
    next close. Files found in a new directory when its watch is added were written
    before any event could be seen: complete if no process has them open for writing, or,
    where that cannot be told, once no write showed up for ``quiet_period`` seconds.

    ``unchanged`` reads the events queued by then first. The kernel queues an event just
    after the change it reports, so a change can be seen before its event: only the
    lease in ``copy_whole`` closes that gap.
    """

    description = "inotify"

    def __init__(self, root: Path, quiet_period: float = QUIET_PERIOD) -> None:
        self.root = root
        self.quiet_period = quiet_period
        self._inotify = inotify.Inotify()
        self._dirs: dict[int, Path] = {}
        self._counter = itertools.count(1)
        # The version of each file: a new one at every event about it.
        self._versions: dict[Path, int] = {}
        self._ready: dict[Path, int] = {}
        # Files found in a directory only after they were created, with what stat said and
        # since when: complete unless a write shows up within the quiet period.
        self._unconfirmed: dict[Path, tuple[StatKey, float]] = {}
        self._settled: set[Path] = set()  # ready ones that were confirmed that way
        try:
            self._watch_tree(root, found="stored")
            if root not in self._dirs.values():
                raise inotify.InotifyError(f"cannot watch {root}: not a directory")
        except BaseException:
            self._inotify.close()
            raise

    def changes(self, timeout: float) -> list[Ready]:
        if not self._ready:
            self._handle(self._inotify.read(self._wait(timeout)))
        self._confirm_quiet_files()
        ready = [
            Ready(path, version, settled=path in self._settled)
            for path, version in self._ready.items()
        ]
        self._ready.clear()
        self._settled.clear()
        return ready

    def unchanged(self, ready: Ready) -> bool:
        self._handle(self._inotify.read(0))
        return self._versions.get(ready.path) == ready.version

    def close(self) -> None:
        self._inotify.close()

    def _wait(self, timeout: float) -> float:
        if not self._unconfirmed:
            return timeout
        due = min(since for _, since in self._unconfirmed.values()) + self.quiet_period
        return max(0.0, min(timeout, due - time.monotonic()))

    def _handle(self, events: list[inotify.Event]) -> None:
        for event in events:
            if event.mask & inotify.IN_Q_OVERFLOW:
                self._overflowed()
                continue
            directory = self._dirs.get(event.wd)
            if directory is None:
                continue  # a watch already given up
            if event.mask & inotify.IN_IGNORED or not event.name:
                self._directory_event(event, directory)
            elif event.mask & inotify.IN_ISDIR:
                self._subdirectory_event(event, directory / event.name)
            else:
                self._file_event(event, directory / event.name)

    def _file_event(self, event: inotify.Event, path: Path) -> None:
        version = next(self._counter)
        self._versions[path] = version
        self._ready.pop(path, None)
        self._unconfirmed.pop(path, None)
        self._settled.discard(path)
        if event.mask & (inotify.IN_CLOSE_WRITE | inotify.IN_MOVED_TO):
            self._ready[path] = version
        elif event.mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM):
            del self._versions[path]

    def _subdirectory_event(self, event: inotify.Event, path: Path) -> None:
        if event.mask & inotify.IN_CREATE:
            # Files may have been written into it before its watch was in place.
            self._watch_tree(path, found="unconfirmed")
        elif event.mask & inotify.IN_MOVED_TO:
            # A directory renamed into place is taken as complete, as a renamed file is.
            self._watch_tree(path, found="complete")
        elif event.mask & inotify.IN_MOVED_FROM:
            self._forget_tree(path)

    def _directory_event(self, event: inotify.Event, directory: Path) -> None:
        if event.mask & inotify.IN_IGNORED:
            del self._dirs[event.wd]
        if directory == self.root and event.mask & (
            inotify.IN_IGNORED | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF
        ):
            raise inotify.InotifyError(f"{self.root} itself was removed or moved")

    def _watch_tree(self, top: Path, found: str) -> None:
        """Watch ``top`` and every directory below it, each before listing it, so that no
        file created meanwhile is missed; ``found`` is what the files already there are."""
        pending = [top]
        while pending:
            directory = pending.pop()
            # The root may be a link to the directory; below it, links are not followed.
            mask = _WATCH_MASK & ~inotify.IN_DONT_FOLLOW if directory == self.root else _WATCH_MASK
            try:
                wd = self._inotify.add_watch(directory, mask)
                entries = list(os.scandir(directory))
            except inotify.InotifyError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue  # already gone again
                raise
            except (FileNotFoundError, NotADirectoryError):
                continue
            self._dirs[wd] = directory
            for entry in entries:
                path = Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                elif entry.is_file(follow_symlinks=False):
                    self._found(path, found)

    def _found(self, path: Path, found: str) -> None:
        if found == "stored" or path in self._versions:
            return  # nothing to do, or an event about it came first
        writing = open_for_writing(path) if found == "unconfirmed" else False
        if writing is False:
            self._announce(path, settled=found == "unconfirmed")
        elif writing is None:
            key = stat_key(path)
            if key is not None:
                self._unconfirmed[path] = (key, time.monotonic())
        # Still open for writing: the watch is in place, so its close will be reported.

    def _announce(self, path: Path, *, settled: bool) -> None:
        version = next(self._counter)
        self._versions[path] = version
        self._ready[path] = version
        if settled:
            self._settled.add(path)

    def _forget_tree(self, top: Path) -> None:
        # Its watches would go on reporting under the old name; a rename back into the
        # tree (IN_MOVED_TO) watches it again under the new one.
        for wd, directory in list(self._dirs.items()):
            if directory.is_relative_to(top):
                del self._dirs[wd]
                self._inotify.rm_watch(wd)
        for table in (self._versions, self._ready, self._unconfirmed):
            for path in [path for path in table if path.is_relative_to(top)]:
                del table[path]
        self._settled = {path for path in self._settled if not path.is_relative_to(top)}

    def _overflowed(self) -> None:
        # Events were lost: no file is known complete any more, and a new directory may
        # have gone unwatched. Re-watching everything finds both.
        self._versions.clear()
        self._ready.clear()
        self._settled.clear()
        self._watch_tree(self.root, found="unconfirmed")

    def _confirm_quiet_files(self) -> None:
        now = time.monotonic()
        for path, (key, since) in list(self._unconfirmed.items()):
            if now - since < self.quiet_period:
                continue
            current = stat_key(path)
            if current is None:
                del self._unconfirmed[path]
            elif current != key:
                self._unconfirmed[path] = (current, now)
            else:
                del self._unconfirmed[path]
                self._announce(path, settled=True)


def default_watcher(root: Path) -> Watcher:
    """inotify where the system has it, else polling (the description says why)."""
    try:
        return InotifyWatcher(root)
    except (inotify.InotifyError, OSError) as exc:  # OSError: a directory it may not list
        return PollingWatcher(root, reason=str(exc))


def stat_key(path: Path) -> StatKey | None:
    try:
        found = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _key(found)


def scan(root: Path) -> dict[Path, StatKey]:
    """Every regular file under ``root`` (symbolic links not followed) and its version."""
    return survey(root)[0]


def survey(root: Path) -> tuple[dict[Path, StatKey], dict[Path, str]]:
    """As ``scan``, and besides what is neither a regular file nor a directory (a link, a
    FIFO), with what it is."""
    files: dict[Path, StatKey] = {}
    others: dict[Path, str] = {}
    try:
        for entry in untrusted.walk(root):
            key = _key(entry.stat)
            if key is not None:
                files[root / entry.relative] = key
            elif not stat.S_ISDIR(entry.stat.st_mode):
                others[root / entry.relative] = untrusted.kind(entry.stat.st_mode)
    except (FileNotFoundError, NotADirectoryError):
        pass  # no tree (yet): nothing in it
    return files, others


class NotWhole(Exception):
    """No whole version of the file to copy now: it is gone, or being written."""


class NotFollowed(NotWhole):
    """What is there is no regular file reached without a link: never read."""


def copy_whole(path: Path, target: Path, root: Path | None = None) -> StatKey:
    """Copy ``path`` to ``target`` as one complete version; returns which one. Below
    ``root`` (by default, the file's own directory) no link is followed."""
    top = path.parent if root is None else root
    try:
        fd, opened = untrusted.open_file(top, path.relative_to(top).as_posix())
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise NotWhole("gone") from exc
    except untrusted.Refused as exc:
        raise NotFollowed(str(exc)) from exc
    leased = _take_read_lease(fd)
    try:
        if leased is False:
            raise NotWhole("open for writing")
        before = _key(opened)
        if before is None or stat_key(path) != before:
            raise NotWhole("replaced")
        with open(target, "wb") as out:
            while data := os.read(fd, COPY_CHUNK):
                if leased and not _lease_held(fd):
                    raise NotWhole("opened for writing while it was copied")
                out.write(data)
        if leased and not _lease_held(fd):
            raise NotWhole("opened for writing while it was copied")
        if stat_key(path) != before:
            raise NotWhole("changed while it was copied")
        return before
    finally:
        if leased:
            _release_lease(fd)
        os.close(fd)


def open_for_writing(path: Path) -> bool | None:
    """Whether some process has ``path`` open for writing; None where this system or
    file system cannot say (no leases)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        leased = _take_read_lease(fd)
        if leased:
            _release_lease(fd)
        return None if leased is None else not leased
    finally:
        os.close(fd)


def _take_read_lease(fd: int) -> bool | None:
    """True: held, so no process has the file open for writing; False: one has; None:
    leases are not available here (not Linux, a file system without them, not the
    file's owner)."""
    set_lease = getattr(fcntl, "F_SETLEASE", None)
    set_signal = getattr(fcntl, "F_SETSIG", None)
    if set_lease is None or set_signal is None:
        return None
    try:
        # A writer's open breaks the lease with a signal, SIGIO by default, which would
        # end the process; SIGURG is ignored unless handled. The copy checks instead.
        fcntl.fcntl(fd, set_signal, signal.SIGURG)
        fcntl.fcntl(fd, set_lease, fcntl.F_RDLCK)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def _lease_held(fd: int) -> bool:
    # While a writer waits for it, the lease reads as what it is being broken down to.
    held: int = fcntl.fcntl(fd, fcntl.F_GETLEASE)
    return held == fcntl.F_RDLCK


def _release_lease(fd: int) -> None:
    # Closing the descriptor releases it too; this only lets a waiting writer go sooner.
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)


def _key(found: os.stat_result) -> StatKey | None:
    if not stat.S_ISREG(found.st_mode):
        return None
    return (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino)
