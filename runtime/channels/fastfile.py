"""FastFile mode: the channel mounted read-only at ``input/data/<channel>``, each file
fetched the first time it is opened, so the script starts without waiting for the data.

The tree (directories, files and their sizes) comes from the listing made before the
script starts; a file's content is fetched into ``input/.fastfile/<channel>/`` the first
time it is opened and read from there afterwards. Concurrent first opens of one file
fetch it once: the others wait for that fetch. The filesystem is served by
``runtime.linux.fuse`` in this process, mounted with mount(2) itself.

Where FUSE cannot be mounted (no /dev/fuse, or not permitted, as in an unprivileged
pod), ``serve`` says so in one line and returns None: the caller downloads the channel as
File mode does, and the script reads the same files at the same path.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from contract import storage
from runtime.channels import channel_data
from runtime.channels.channel_data import ChannelError, ChannelObject
from runtime.linux import fuse, mounts

DEVICE = "/dev/fuse"
# The tree never changes while mounted: the kernel may keep what it learnt for this long.
_STABLE_TTL = 3600.0
MountFunction = Callable[[Path, int], None]
Fetch = Callable[[ChannelObject, Path], None]


def mount_fuse(mountpoint: Path, fd: int) -> None:
    """Mount the FUSE connection ``fd`` at ``mountpoint``: read-only, for every user
    (the script may run as another), permissions checked by the kernel from the modes."""
    options = ",".join(
        [
            f"fd={fd}",
            f"rootmode={stat.S_IFDIR:o}",
            f"user_id={os.getuid()}",
            f"group_id={os.getgid()}",
            "allow_other",
            "default_permissions",
        ]
    )
    flags = mounts.MS_RDONLY | mounts.MS_NOSUID | mounts.MS_NODEV
    mounts.mount("runyard", mountpoint, "fuse.runyard", flags, options)


def serve(
    name: str,
    objects: list[ChannelObject],
    mountpoint: Path,
    cache_dir: Path,
    say: Callable[[str], None],
    *,
    mount: MountFunction = mount_fuse,
    fetch: Fetch = channel_data.land,
) -> FastFileChannel | None:
    """The channel mounted and served; None (having said why) where FUSE cannot be."""
    channel = FastFileChannel(name, objects, mountpoint, cache_dir, say, fetch=fetch)
    try:
        return channel.mount(mount)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        say(
            f"Channel {name}: FastFile needs a FUSE mount, which this instance cannot make "
            f"({reason}); falling back to File mode: downloading the channel now"
        )
        return None


@dataclass
class _Node:
    ino: int
    parent: int
    name: str
    item: ChannelObject | None = None  # None for a directory
    children: dict[str, int] = field(default_factory=dict)
    # A file's content, once fetched, and its size then (the stored size of a gzipped
    # object is not its content's).
    cached: Path | None = None
    size: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ChannelTree:
    """The ``fuse.Filesystem`` of one channel: its objects as a tree, fetched lazily."""

    def __init__(
        self,
        name: str,
        objects: list[ChannelObject],
        cache_dir: Path,
        say: Callable[[str], None],
        fetch: Fetch = channel_data.land,
    ) -> None:
        self.name = name
        self.cache_dir = cache_dir
        self.say = say
        self._fetch = fetch
        self.error: str | None = None
        self.fetched = 0
        self._nodes: dict[int, _Node] = {fuse.ROOT_ID: _Node(fuse.ROOT_ID, fuse.ROOT_ID, "")}
        for item in objects:
            self._add(item)
        self._handles: dict[int, int] = {}
        self._next_handle = itertools.count(1)
        self._handles_lock = threading.Lock()

    def _add(self, item: ChannelObject) -> None:
        *directories, filename = item.key.split("/")
        parent = self._nodes[fuse.ROOT_ID]
        for depth, part in enumerate(directories):
            ino = parent.children.get(part)
            if ino is None:
                ino = len(self._nodes) + 1
                self._nodes[ino] = _Node(ino, parent.ino, part)
                parent.children[part] = ino
            parent = self._nodes[ino]
            if parent.item is not None:
                # channels.objects_of refuses such a channel before anything is mounted.
                raise ValueError(f"{'/'.join(directories[: depth + 1])!r} is a file")
        if filename in parent.children:
            raise ValueError(f"{item.key!r} is there twice")
        ino = len(self._nodes) + 1
        self._nodes[ino] = _Node(ino, parent.ino, filename, item, size=item.size)
        parent.children[filename] = ino

    # -- fuse.Filesystem -----------------------------------------------------------------

    def lookup(self, parent: int, name: str) -> fuse.Attributes | None:
        node = self._nodes.get(parent)
        if node is None:
            return None
        if name == "..":
            return self._attributes(self._nodes[node.parent])
        ino = node.children.get(name)
        return None if ino is None else self._attributes(self._nodes[ino])

    def getattr(self, ino: int) -> fuse.Attributes | None:
        node = self._nodes.get(ino)
        return None if node is None else self._attributes(node)

    def listdir(self, ino: int) -> list[tuple[str, fuse.Attributes]] | None:
        node = self._nodes.get(ino)
        if node is None or node.item is not None:
            return None
        return [
            (name, self._attributes(self._nodes[child]))
            for name, child in sorted(node.children.items())
        ]

    def open(self, ino: int) -> int:
        node = self._nodes.get(ino)
        if node is None:
            raise OSError(errno.ENOENT, "no such file")
        if node.item is None:
            raise OSError(errno.EISDIR, "a directory")
        path = self._cached(node, node.item)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with self._handles_lock:
            handle = next(self._next_handle)
            self._handles[handle] = fd
        return handle

    def read(self, handle: int, offset: int, size: int) -> bytes:
        fd = self._handles.get(handle)
        if fd is None:
            raise OSError(errno.EBADF, "not an open file")
        return os.pread(fd, size, offset)

    def release(self, handle: int) -> None:
        with self._handles_lock:
            fd = self._handles.pop(handle, None)
        if fd is not None:
            os.close(fd)

    def usage(self) -> tuple[int, int]:
        files = [node for node in self._nodes.values() if node.item is not None]
        return sum(node.size for node in files), len(files)

    # -- the cache -----------------------------------------------------------------------

    def _cached(self, node: _Node, item: ChannelObject) -> Path:
        """The file's content on local disk, fetched now if this is its first open; an
        open of the same file meanwhile waits here for this fetch instead of its own."""
        with node.lock:
            if node.cached is not None:
                return node.cached
            target = self.cache_dir / item.key
            try:
                self._fetch(item, target)
                size = target.stat().st_size
            except storage.StorageError as exc:
                self._fetch_failed(str(exc))
                raise OSError(errno.EIO, "fetch failed") from exc
            except OSError as exc:  # the cache's disk: full, or gone
                self._fetch_failed(f"{item.uri}: cannot cache it ({exc.strerror or exc})")
                raise OSError(errno.EIO, "fetch failed") from exc
            node.size = size
            node.cached = target
            with self._handles_lock:  # fetches of different files run side by side
                self.fetched += 1
            return target

    def _fetch_failed(self, message: str) -> None:
        # The script sees EIO; the job's failure names the object (the first to fail).
        if self.error is None:
            self.error = message
        self.say(f"Channel {self.name}: FastFile could not fetch a file: {message}")

    def _attributes(self, node: _Node) -> fuse.Attributes:
        if node.item is None:
            return fuse.Attributes(node.ino, 0, directory=True, ttl=_STABLE_TTL)
        # Until a gzipped file is fetched its size is the stored one, a stand-in: the
        # kernel must ask again (ttl 0), and after the first open it learns the real one.
        unsure = node.item.gzip and node.cached is None
        return fuse.Attributes(
            node.ino, node.size, directory=False, ttl=0 if unsure else _STABLE_TTL
        )

    def close_handles(self) -> None:
        with self._handles_lock:
            handles, self._handles = self._handles, {}
        for fd in handles.values():
            os.close(fd)


class FastFileChannel:
    """One channel's mount: ``mount`` it, and ``stop`` it once the script is done."""

    def __init__(
        self,
        name: str,
        objects: list[ChannelObject],
        mountpoint: Path,
        cache_dir: Path,
        say: Callable[[str], None],
        *,
        fetch: Fetch = channel_data.land,
    ) -> None:
        self.name = name
        self.mountpoint = mountpoint
        self.say = say
        self.tree = ChannelTree(name, objects, cache_dir, say, fetch)
        self.session: fuse.Session | None = None

    @property
    def error(self) -> str | None:
        return self.tree.error

    def mount(self, mount: MountFunction = mount_fuse) -> FastFileChannel:
        """Mount and start serving; an OSError if /dev/fuse cannot be opened or the mount
        cannot be made. Whatever fails after the mount is made takes the mount down
        again and is raised as a ChannelError: the mount point must not be left to a
        mount nobody serves, where every read would hang."""
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        # Non-blocking, so the serving thread waits in poll(), where stop() reaches it;
        # close-on-exec, so no script inherits the connection and keeps it alive.
        fd = os.open(DEVICE, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mount(self.mountpoint, fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            self.session = fuse.Session(fd, self.tree, log=self.say).start()
        except BaseException as exc:
            self._unmount_unserved(fd)
            if isinstance(exc, Exception):
                raise ChannelError(
                    f"channel {self.name}: could not serve the FastFile mount at "
                    f"{self.mountpoint}: {exc!r}"
                ) from exc
            raise
        return self

    def _unmount_unserved(self, fd: int) -> None:
        try:
            mounts.unmount_lazily(self.mountpoint)
        except OSError as exc:
            self.say(f"Channel {self.name}: could not unmount {self.mountpoint}: {exc}")
        os.close(fd)

    def stop(self) -> None:
        """Unmount (lazily: a process still reading there cannot make this wait) and end
        the connection; idempotent."""
        session, self.session = self.session, None
        if session is None:
            return
        try:
            mounts.unmount_lazily(self.mountpoint)
        except OSError as exc:
            self.say(f"Channel {self.name}: could not unmount {self.mountpoint}: {exc}")
        session.stop()
        self.tree.close_handles()
