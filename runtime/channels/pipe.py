"""Pipe mode: a channel streamed into FIFOs, one per pass over the data, as SageMaker does.

For channel ``train`` the script opens ``input/data/train_0`` and reads every object of
its share of the channel, in key order, one after another, then end of file; for a second
epoch it opens ``train_1``, and so on. Nothing lands on disk: each object is read from
storage in chunks (gunzipped on the way if the channel is compressed) and written into
the FIFO as the script consumes it.

A writer thread per channel waits in open(2) on ``<channel>_<n>`` for the script to
open it for reading, streams, closes (the script sees EOF), and goes on to the next. A script
that closes early (it read what it wanted) breaks the pipe: that epoch ends quietly and
the next FIFO is made. Each FIFO exists before a script could look for it: the first
before ``start`` returns, each next one once the one before is opened. ``stop`` ends the
thread wherever it waits (in a read from storage, once that chunk has come) and removes
the FIFOs. A storage error ends the epoch early and makes no further FIFO; it is kept in
``error``, so the job fails naming the object even if the script made do with what it
read.

The writer (root) opens a FIFO's name without following a link, and streams only into the
FIFO it finds there, never into a file put in its place: the data directory stays root's
where the job runs as a user of its own (runtime.instance.job_user), and this holds even
where something else could write there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from contract import storage, untrusted
from runtime.channels import channel_data
from runtime.channels.channel_data import ChannelError, ChannelObject

# Opening a name in the job's directory: never through a link, never waiting.
_NO_WAIT = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class _Stopped(Exception):
    """``stop`` was called while the writer was streaming."""


class PipeChannel:
    def __init__(
        self,
        name: str,
        objects: list[ChannelObject],
        data_dir: Path,
        say: Callable[[str], None],
    ) -> None:
        self.name = name
        self.objects = objects
        self.data_dir = data_dir
        self.say = say
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # The FIFO the writer is at (or about to wait in open(2) on); stop() opens it for
        # reading to release that wait.
        self._current: Path | None = None
        self._made: list[Path] = []
        # Wakes the writer from poll(); made by start(), closed by the writer thread as it
        # ends (under the lock, so stop() never writes to a closed, reused descriptor).
        self._wake: tuple[int, int] | None = None
        self._thread = threading.Thread(target=self._serve, name=f"pipe-{name}", daemon=True)

    def fifo(self, epoch: int) -> Path:
        return self.data_dir / f"{self.name}_{epoch}"

    def start(self) -> PipeChannel:
        """Make ``<channel>_0`` before returning, so a script started next finds it."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._make(self.fifo(0))
        except OSError as exc:
            raise ChannelError(f"channel {self.name}: cannot make {self.fifo(0)}: {exc}") from exc
        try:
            self._wake = os.pipe()
            self._thread.start()
        except BaseException:
            self._close_wake()
            self.fifo(0).unlink(missing_ok=True)
            raise
        return self

    @property
    def serving(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """End the writer wherever it is and remove the FIFOs. Never waits for a reader:
        one that never came, or that stopped reading, cannot hold this up."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
            current = self._current
            if self._wake is not None:
                os.write(self._wake[1], b"x")  # wakes a writer waiting for room in the pipe
        release = None
        if current is not None and self._thread.is_alive():
            # A writer blocked in open(2) waits for a reader: be one, without waiting for
            # a writer in turn (O_NONBLOCK), and stay one until the writer has gone.
            with contextlib.suppress(OSError):  # gone, or the job's link: not followed
                release = os.open(current, os.O_RDONLY | _NO_WAIT)
        try:
            if self._thread.is_alive():
                self._thread.join(timeout)
            if self._thread.is_alive():
                # Stuck in a read from storage: it sees the stop after that chunk.
                self.say(f"Channel {self.name}: the Pipe writer did not stop in {timeout:.0f} s")
        finally:
            if release is not None:
                os.close(release)
            for path in self._made:
                path.unlink(missing_ok=True)

    def _serve(self) -> None:
        try:
            self._serve_epochs()
        finally:
            self._close_wake()

    def _close_wake(self) -> None:
        with self._lock:
            wake, self._wake = self._wake, None
        if wake is not None:
            os.close(wake[0])
            os.close(wake[1])

    def _serve_epochs(self) -> None:
        epoch = 0
        while not self._stopping.is_set():
            path = self.fifo(epoch)
            try:
                fd = _open_fifo(path)  # waits until a reader opens it (or stop() does)
            except FileNotFoundError:
                return  # removed by a stop() that gave up waiting for this thread
            except OSError as exc:
                self._fail(f"{path}: {exc.strerror or exc}", self.fifo(epoch + 1))
                return
            try:
                # The next epoch's FIFO exists as soon as this one is being read: a script
                # that opens it once this one ends (or once it has read enough of it)
                # finds it, and waits there until this epoch is done.
                if not self._make(self.fifo(epoch + 1)):
                    return  # the reader was stop(), releasing this open
                with contextlib.suppress(BrokenPipeError):  # the script read enough
                    self._stream(fd)
            except _Stopped:
                return
            except storage.StorageError as exc:
                self._fail(str(exc), self.fifo(epoch + 1))
                return
            except OSError as exc:
                self._fail(f"{path}: {exc.strerror or exc}", self.fifo(epoch + 1))
                return
            finally:
                os.close(fd)
            epoch += 1

    def _make(self, path: Path) -> bool:
        """mkfifo, unless stop() came first (then False): under the lock, so that stop()
        either sees this FIFO as the one to release or this sees it stopping."""
        with self._lock:
            if self._stopping.is_set():
                return False
            # Readable by the job's user, which the runtime is not (runtime.linux.confine).
            os.mkfifo(path, 0o644)
            self._made.append(path)
            self._current = path
            return True

    def _stream(self, fd: int) -> None:
        assert self._wake is not None  # made by start(), closed only when this thread ends
        wake_read = self._wake[0]
        # Non-blocking from here: a write that must wait for the reader waits in poll(),
        # where stop() can reach it.
        os.set_blocking(fd, False)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        poller.register(wake_read, select.POLLIN)
        for item in self.objects:
            for chunk in channel_data.chunks(item):
                # A read from storage cannot be woken: a stop that came meanwhile is
                # seen here, after it.
                if self._stopping.is_set():
                    raise _Stopped
                self._write(fd, memoryview(chunk), poller, wake_read)

    def _write(self, fd: int, data: memoryview, poller: select.poll, wake_read: int) -> None:
        while data:
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                ready = {ready_fd for ready_fd, _events in poller.poll()}
                if wake_read in ready:
                    raise _Stopped from None
                continue
            data = data[written:]

    def _fail(self, message: str, next_fifo: Path) -> None:
        self.error = message
        self.say(f"Channel {self.name}: Pipe mode stopped: {message}")
        # No next epoch: a script opening it from now on gets ENOENT, and one already
        # waiting in open(2), or opening it before the unlink, gets an empty epoch (EOF)
        # rather than waiting forever. Held open for reading and writing (which never
        # waits on Linux) across the unlink, so no reader can slip in unanswered.
        try:
            held = os.open(next_fifo, os.O_RDWR | _NO_WAIT)
        except OSError:
            held = None
        next_fifo.unlink(missing_ok=True)
        if held is not None:
            os.close(held)


def _open_fifo(path: Path) -> int:
    """The FIFO at ``path``, open for writing once a reader has opened it; refused (never
    written) where the job put a link or anything but a FIFO in its place."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise OSError("a symbolic link is there, not the channel's FIFO") from exc
    found = os.fstat(fd)
    if not stat.S_ISFIFO(found.st_mode):
        os.close(fd)
        raise OSError(f"{untrusted.kind(found.st_mode)} is there, not the channel's FIFO")
    return fd
