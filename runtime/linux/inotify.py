"""Linux inotify through ctypes: the few calls a directory watcher needs, nothing more.

The standard library has no binding and the runtime takes no dependencies, so the three
system calls are reached through libc. Anything that keeps them from working (another
operating system, a libc without them, no watches left) is an ``InotifyError``, which
callers take as "watch some other way".
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
from dataclasses import dataclass
from pathlib import Path

# From <sys/inotify.h>.
IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
_READ_SIZE = 256 * 1024


class InotifyError(Exception):
    """inotify cannot be used here, or a watch could not be added (``errno`` says why)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.errno = code


@dataclass(frozen=True)
class Event:
    wd: int
    mask: int
    cookie: int
    name: str  # empty for events about the watched directory itself


class Inotify:
    """One inotify instance: add and remove directory watches, read what happened."""

    def __init__(self) -> None:
        libc = _libc()
        fd: int = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise InotifyError(f"inotify_init1 failed: {os.strerror(ctypes.get_errno())}")
        self._libc = libc
        self.fd = fd

    def add_watch(self, path: Path, mask: int) -> int:
        """The watch descriptor; the same one again for a directory already watched."""
        wd: int = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            code = ctypes.get_errno()
            raise InotifyError(f"cannot watch {path}: {os.strerror(code)}", code)
        return wd

    def rm_watch(self, wd: int) -> None:
        # EINVAL: the kernel already dropped it (its directory is gone); nothing to undo.
        self._libc.inotify_rm_watch(self.fd, wd)

    def read(self, timeout: float) -> list[Event]:
        """Events queued now, waiting up to ``timeout`` seconds for the first one."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            return []
        try:
            return _parse(os.read(self.fd, _READ_SIZE))
        except BlockingIOError:
            return []
        except OSError as exc:
            raise InotifyError(f"reading inotify events failed: {exc}", exc.errno or 0) from exc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse(data: bytes) -> list[Event]:
    events: list[Event] = []
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        name = os.fsdecode(data[start : start + length].rstrip(b"\0"))
        events.append(Event(wd, mask, cookie, name))
        offset = start + length
    return events


def _libc() -> ctypes.CDLL:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
            getattr(libc, name)
    except (OSError, AttributeError) as exc:
        raise InotifyError(f"inotify is not available on this system ({exc})") from exc
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.inotify_rm_watch.restype = ctypes.c_int
    return libc
