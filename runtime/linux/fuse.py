"""A read-only filesystem served to the kernel over /dev/fuse, without libfuse.

Training machines have no libfuse, so the runtime speaks the kernel's FUSE protocol
itself: requests are read from the /dev/fuse file descriptor the filesystem was mounted
with (one request per read), and each is answered by a single write of an out-header and
its reply. Message layouts follow ``include/uapi/linux/fuse.h``; only what a read-only
tree needs is spoken, anything else is answered ENOSYS (the kernel then stops asking, or
does the work itself, as for locks) or EROFS where it would change the tree.

One thread reads requests and answers the quick ones (lookups, attributes, listings);
OPEN and READ go to a small pool, since an OPEN may wait for a download and must not hold
up the rest of the filesystem.
"""

from __future__ import annotations

import collections
import enum
import errno
import os
import queue
import select
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

KERNEL_MAJOR = 7
# The newest minor version whose layouts are written here; the connection then speaks the
# older of the kernel's and this. 7.31 (Linux 5.4) already has the 64-byte INIT reply and
# every layout used below, and no newer feature is asked for.
KERNEL_MINOR = 31
ROOT_ID = 1
# Largest WRITE the kernel may send. None comes (the mount is read-only), but the kernel
# refuses to hand requests to a reader whose buffer could not hold one.
MAX_WRITE = 128 * 1024
_BUFFER_SIZE = MAX_WRITE + 4096
BLOCK_SIZE = 4096


class Opcode(enum.IntEnum):
    LOOKUP = 1
    FORGET = 2
    GETATTR = 3
    SETATTR = 4
    READLINK = 5
    SYMLINK = 6
    MKNOD = 8
    MKDIR = 9
    UNLINK = 10
    RMDIR = 11
    RENAME = 12
    LINK = 13
    OPEN = 14
    READ = 15
    WRITE = 16
    STATFS = 17
    RELEASE = 18
    FSYNC = 20
    SETXATTR = 21
    GETXATTR = 22
    LISTXATTR = 23
    REMOVEXATTR = 24
    FLUSH = 25
    INIT = 26
    OPENDIR = 27
    READDIR = 28
    RELEASEDIR = 29
    FSYNCDIR = 30
    ACCESS = 34
    CREATE = 35
    INTERRUPT = 36
    DESTROY = 38
    BATCH_FORGET = 42
    FALLOCATE = 43
    RENAME2 = 45
    COPY_FILE_RANGE = 47
    TMPFILE = 51


# Requests that would change the tree: refused as on any read-only filesystem.
_WRITES = frozenset(
    {
        Opcode.SETATTR,
        Opcode.SYMLINK,
        Opcode.MKNOD,
        Opcode.MKDIR,
        Opcode.UNLINK,
        Opcode.RMDIR,
        Opcode.RENAME,
        Opcode.LINK,
        Opcode.WRITE,
        Opcode.SETXATTR,
        Opcode.REMOVEXATTR,
        Opcode.CREATE,
        Opcode.FALLOCATE,
        Opcode.RENAME2,
        Opcode.COPY_FILE_RANGE,
        Opcode.TMPFILE,
    }
)
# Requests the kernel expects no answer to: forgetting is bookkeeping only, and an
# interrupted request is simply answered when it is done (the kernel drops the answer).
_NO_REPLY = frozenset({Opcode.FORGET, Opcode.BATCH_FORGET, Opcode.INTERRUPT})
# Requests that may wait (an OPEN downloads the file): served off the reading thread.
_SLOW = frozenset({Opcode.OPEN, Opcode.READ})

# fuse_init_in / fuse_init_out flags
FUSE_ASYNC_READ = 1 << 0
# fuse_open_out.open_flags: a file's content never changes, so what the kernel cached
# from an earlier open stays valid.
FOPEN_KEEP_CACHE = 1 << 1

# len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding
_IN_HEADER = struct.Struct("<IIQQIIIHH")
# len, error (minus an errno), unique
_OUT_HEADER = struct.Struct("<IiQ")
# major, minor, max_readahead, flags (the rest of fuse_init_in is not needed)
_INIT_IN = struct.Struct("<IIII")
# major, minor, max_readahead, flags, max_background, congestion_threshold, max_write,
# time_gran, max_pages, map_alignment, flags2, max_stack_depth, unused[6]
_INIT_OUT = struct.Struct("<IIIIHHIIHHII6I")
# ino, size, blocks, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode, nlink,
# uid, gid, rdev, blksize, flags
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
# nodeid, generation, entry_valid, attr_valid, entry_valid_nsec, attr_valid_nsec (+ attr)
_ENTRY_OUT = struct.Struct("<QQQQII")
# attr_valid, attr_valid_nsec, dummy (+ attr)
_ATTR_OUT = struct.Struct("<QII")
# fh, open_flags, padding
_OPEN_IN = struct.Struct("<II")
_OPEN_OUT = struct.Struct("<QII")
# fh, offset, size (the rest of fuse_read_in is not needed)
_READ_IN = struct.Struct("<QQI")
# fh (fuse_release_in starts with it)
_RELEASE_IN = struct.Struct("<Q")
# ino, off, namelen, type (+ name, padded to 8 bytes)
_DIRENT = struct.Struct("<QQII")
# blocks, bfree, bavail, files, ffree, bsize, namelen, frsize, padding, spare[6]
_KSTATFS = struct.Struct("<QQQQQIIII6I")
# size, padding: fuse_getxattr_in, and fuse_getxattr_out
_XATTR_SIZE = struct.Struct("<II")
# mask, padding
_ACCESS_IN = struct.Struct("<II")


@dataclass(frozen=True)
class Attributes:
    ino: int
    size: int
    directory: bool
    # How long the kernel may keep this answer (and the name leading to it) without
    # asking again. The tree never changes, so long, except where a size is not known yet.
    ttl: float


class Filesystem(Protocol):
    """What a read-only tree answers; ``ino`` values are the node ids the kernel uses,
    ROOT_ID for the root. Errors are raised as OSError carrying the errno to answer."""

    def lookup(self, parent: int, name: str) -> Attributes | None:
        """The entry ``name`` in directory ``parent``; ``..`` is its parent (the root's
        is itself), which directory listings show."""
        ...

    def getattr(self, ino: int) -> Attributes | None: ...

    def listdir(self, ino: int) -> list[tuple[str, Attributes]] | None: ...

    def open(self, ino: int) -> int: ...

    def read(self, handle: int, offset: int, size: int) -> bytes: ...

    def release(self, handle: int) -> None: ...

    def usage(self) -> tuple[int, int]:
        """(bytes, files) in the tree, for statfs."""
        ...


class Session:
    """Serves one mounted connection (its /dev/fuse descriptor, opened O_NONBLOCK) until
    the kernel ends it (unmounted, nobody using it) or ``stop`` is called."""

    def __init__(
        self,
        fd: int,
        filesystem: Filesystem,
        *,
        log: Callable[[str], None],
        workers: int = 8,
    ) -> None:
        self._fd = fd
        self._fs = filesystem
        self._log = log
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._mounted_at = int(time.time())
        self._wake_read, self._wake_write = os.pipe()
        # Once the descriptor is closed its number may be reused by any file this process
        # opens: a late answer (a fetch that outlived stop()) must not be written there.
        self._fd_lock = threading.Lock()
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[int, int, int, bytes] | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._serve, name="fuse-reader", daemon=True)
        # Daemon threads: a download still running when the job ends must not keep the
        # runtime's process alive.
        self._workers = [
            threading.Thread(target=self._work, name=f"fuse-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        # How many requests of each kind arrived: what the kernel asked, for logs and tests.
        self.requests: collections.Counter[int] = collections.Counter()

    def start(self) -> Session:
        self._reader.start()
        for worker in self._workers:
            worker.start()
        return self

    @property
    def serving(self) -> bool:
        return self._reader.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading and close the connection: any process still using the mount gets
        ENOTCONN instead of waiting for answers that will never come."""
        deadline = time.monotonic() + timeout
        os.write(self._wake_write, b"x")
        self._reader.join(timeout)
        for _ in self._workers:
            self._queue.put(None)
        # A worker still fetching a large file is left to finish on its own (it is a
        # daemon thread); its answer then goes nowhere.
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        with self._fd_lock:
            self._closed = True
            os.close(self._fd)
        os.close(self._wake_read)
        os.close(self._wake_write)

    # -- the reading thread ---------------------------------------------------------------

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while True:
            ready = {fd for fd, _events in poller.poll()}
            if self._wake_read in ready:
                return
            try:
                request = os.read(self._fd, _BUFFER_SIZE)
            except BlockingIOError:
                continue  # taken back by the kernel (interrupted) between poll and read
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue  # the request was interrupted before it was read
                if exc.errno != errno.ENODEV:
                    self._log(f"FUSE: reading requests failed: {exc}")
                return  # ENODEV: unmounted and released; the connection is over
            self._dispatch(request)

    def _dispatch(self, request: bytes) -> None:
        length, opcode, unique, nodeid, *_ids = _IN_HEADER.unpack_from(request)
        body = request[_IN_HEADER.size : length]
        self.requests[opcode] += 1
        if opcode in _NO_REPLY:
            return
        if opcode in _SLOW:
            self._queue.put((opcode, unique, nodeid, body))
        else:
            self._answer(opcode, unique, nodeid, body)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            self._answer(*item)

    # -- answering ------------------------------------------------------------------------

    def _answer(self, opcode: int, unique: int, nodeid: int, body: bytes) -> None:
        try:
            payload = self._handle(opcode, nodeid, body)
        except OSError as exc:
            self._reply(unique, exc.errno or errno.EIO)
            return
        except Exception as exc:  # a bug here must not take the whole mount down
            self._log(f"FUSE: {_name(opcode)} failed: {exc!r}")
            self._reply(unique, errno.EIO)
            return
        self._reply(unique, 0, payload)

    def _reply(self, unique: int, error: int, payload: bytes = b"") -> None:
        header = _OUT_HEADER.pack(_OUT_HEADER.size + len(payload), -error, unique)
        try:
            with self._fd_lock:
                if self._closed:
                    return
                os.write(self._fd, header + payload)
        except OSError as exc:
            # ENOENT: the request was interrupted and is gone; ENODEV: so is the mount.
            if exc.errno not in (errno.ENOENT, errno.ENODEV):
                self._log(f"FUSE: answering failed: {exc}")

    def _handle(self, opcode: int, nodeid: int, body: bytes) -> bytes:
        fs = self._fs
        if opcode == Opcode.INIT:
            return self._init(body)
        if opcode == Opcode.LOOKUP:
            found = fs.lookup(nodeid, os.fsdecode(body.split(b"\0", 1)[0]))
            if found is None:
                raise OSError(errno.ENOENT, "no such entry")
            return self._entry(found)
        if opcode == Opcode.GETATTR:
            return self._attr_out(self._existing(nodeid))
        if opcode == Opcode.OPEN:
            (flags, _open_flags) = _OPEN_IN.unpack_from(body)
            if flags & os.O_ACCMODE != os.O_RDONLY:
                raise OSError(errno.EROFS, "read-only")
            return _OPEN_OUT.pack(fs.open(nodeid), FOPEN_KEEP_CACHE, 0)
        if opcode == Opcode.READ:
            handle, offset, size = _READ_IN.unpack_from(body)
            return fs.read(handle, offset, size)
        if opcode == Opcode.RELEASE:
            fs.release(_RELEASE_IN.unpack_from(body)[0])
            return b""
        if opcode == Opcode.OPENDIR:
            if not self._existing(nodeid).directory:
                raise OSError(errno.ENOTDIR, "not a directory")
            return _OPEN_OUT.pack(0, 0, 0)
        if opcode == Opcode.READDIR:
            _handle, offset, size = _READ_IN.unpack_from(body)
            return self._readdir(nodeid, offset, size)
        if opcode in (Opcode.RELEASEDIR, Opcode.FLUSH, Opcode.DESTROY):
            return b""
        if opcode == Opcode.STATFS:
            return self._statfs()
        if opcode == Opcode.ACCESS:
            (mask, _padding) = _ACCESS_IN.unpack_from(body)
            if mask & os.W_OK:
                raise OSError(errno.EROFS, "read-only")
            self._existing(nodeid)
            return b""
        if opcode == Opcode.GETXATTR:
            raise OSError(errno.ENODATA, "no extended attributes")
        if opcode == Opcode.LISTXATTR:
            (size, _padding) = _XATTR_SIZE.unpack_from(body)
            # Size 0 asks how long the list is; otherwise the (empty) list itself.
            return _XATTR_SIZE.pack(0, 0) if size == 0 else b""
        if opcode in _WRITES:
            raise OSError(errno.EROFS, "read-only")
        raise OSError(errno.ENOSYS, f"{_name(opcode)} is not implemented")

    def _init(self, body: bytes) -> bytes:
        major, minor, max_readahead, flags = _INIT_IN.unpack_from(body)
        if major < KERNEL_MAJOR:
            raise OSError(errno.EPROTO, f"kernel FUSE {major}.{minor} is too old")
        if major > KERNEL_MAJOR:
            # The kernel answers a lower major by sending INIT again with it.
            return _INIT_OUT.pack(KERNEL_MAJOR, KERNEL_MINOR, *([0] * 16))
        return _INIT_OUT.pack(
            KERNEL_MAJOR,
            min(minor, KERNEL_MINOR),
            max_readahead,
            # Reads of one file may be answered out of order, by different workers.
            flags & FUSE_ASYNC_READ,
            16,  # max_background
            12,  # congestion_threshold
            MAX_WRITE,
            1,  # time_gran (ns)
            0,  # max_pages: the kernel's default
            0,  # map_alignment
            0,  # flags2
            0,  # max_stack_depth
            *([0] * 6),
        )

    def _existing(self, ino: int) -> Attributes:
        found = self._fs.getattr(ino)
        if found is None:
            raise OSError(errno.ENOENT, "no such node")
        return found

    def _attr(self, attributes: Attributes) -> bytes:
        if attributes.directory:
            mode, links = stat.S_IFDIR | 0o555, 2
        else:
            mode, links = stat.S_IFREG | 0o444, 1
        now = self._mounted_at
        size = attributes.size
        return _ATTR.pack(
            attributes.ino,
            size,
            (size + 511) // 512,
            now,
            now,
            now,
            0,
            0,
            0,
            mode,
            links,
            self._uid,
            self._gid,
            0,
            BLOCK_SIZE,
            0,
        )

    def _entry(self, attributes: Attributes) -> bytes:
        seconds, nanoseconds = _split(attributes.ttl)
        head = _ENTRY_OUT.pack(attributes.ino, 0, seconds, seconds, nanoseconds, nanoseconds)
        return head + self._attr(attributes)

    def _attr_out(self, attributes: Attributes) -> bytes:
        seconds, nanoseconds = _split(attributes.ttl)
        return _ATTR_OUT.pack(seconds, nanoseconds, 0) + self._attr(attributes)

    def _readdir(self, ino: int, offset: int, size: int) -> bytes:
        listing = self._fs.listdir(ino)
        if listing is None:
            raise OSError(errno.ENOTDIR, "not a directory")
        parent = self._fs.lookup(ino, "..")
        here = self._existing(ino)
        entries = [(".", here), ("..", parent or here), *listing]
        out = bytearray()
        # An entry's offset is where the next listing call resumes: its index plus one.
        for index in range(offset, len(entries)):
            name, attributes = entries[index]
            encoded = os.fsencode(name)
            kind = (stat.S_IFDIR if attributes.directory else stat.S_IFREG) >> 12
            record = _DIRENT.pack(attributes.ino, index + 1, len(encoded), kind) + encoded
            record += b"\0" * (-len(record) % 8)
            if len(out) + len(record) > size:
                break
            out += record
        return bytes(out)

    def _statfs(self) -> bytes:
        total, files = self._fs.usage()
        blocks = (total + BLOCK_SIZE - 1) // BLOCK_SIZE
        return _KSTATFS.pack(blocks, 0, 0, files, 0, BLOCK_SIZE, 255, BLOCK_SIZE, 0, *([0] * 6))


def _split(seconds: float) -> tuple[int, int]:
    whole = int(seconds)
    return whole, int((seconds - whole) * 1e9)


def _name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"opcode {opcode}"
