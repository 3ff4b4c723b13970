"""mount(2), umount2(2) and the mount table, from Python through ctypes.

The runtime mounts its FastFile channels itself: training machines have neither libfuse
nor fusermount, and the runtime runs as root where FUSE is allowed at all. The local
backend reads the same table to take down, lazily, whatever a killed runtime left mounted.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from pathlib import Path

# <sys/mount.h>
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

MOUNTINFO = Path("/proc/self/mountinfo")
# mountinfo writes space, tab, newline and backslash in paths as \ooo (octal).
_ESCAPE = re.compile(rb"\\([0-7]{3})")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.mount.restype = ctypes.c_int
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.umount2.restype = ctypes.c_int
    return libc


def mount(source: str, target: Path, fstype: str, flags: int, options: str) -> None:
    """mount(2); an OSError with the call's errno (EPERM where the process may not)."""
    result = _libc().mount(
        source.encode(), os.fsencode(target), fstype.encode(), flags, options.encode()
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(target))


def unmount_lazily(target: Path | str) -> None:
    """umount2(MNT_DETACH): the mount leaves the tree now, and goes away once nobody
    uses it, so a process still reading there cannot make this fail or wait."""
    if _libc().umount2(os.fsencode(target), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(target))


def mount_points(mountinfo: Path = MOUNTINFO) -> list[str]:
    """Every mount point this process sees, in the table's order (none where there is no
    mount table to read: not Linux)."""
    try:
        table = mountinfo.read_bytes()
    except FileNotFoundError:
        return []
    found = []
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) > 4:
            found.append(os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m[1], 8)]), fields[4])))
    return found


def unmount_under(directory: Path) -> list[str]:
    """Lazily unmount every mount at or below ``directory``; returns those unmounted.

    Deepest first, since detaching a mount takes the ones inside it along and they could
    then no longer be named. One that cannot be unmounted (gone meanwhile, not ours to
    unmount) is skipped: this is cleanup, and the caller goes on regardless.
    """
    root = os.path.realpath(directory)
    inside = [p for p in mount_points() if p == root or p.startswith(root.rstrip("/") + "/")]
    unmounted = []
    for point in sorted(inside, key=len, reverse=True):
        try:
            unmount_lazily(point)
        except OSError:
            continue
        unmounted.append(point)
    return unmounted
