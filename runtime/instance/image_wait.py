"""Waiting for the job's image, where the local backend builds it on first use.

The server's builder makes the image in its store while the instances start; an instance
waits for the builder's marker, showing the build's progress in the job's log, and fails
with the builder's reason when the build fails. A builder holds the image's lock for as
long as it builds, so an image that is neither whole nor failed with no one holding its
lock was left by a builder that died.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from contract.images import StoredImage

POLL_SECONDS = 0.5
# How often a wait with nothing new to show says that it still waits.
HEARTBEAT_SECONDS = 30.0


class ImageUnavailable(Exception):
    """The image could not be built; the message says why, in the builder's words."""


def wait_for(
    stored: StoredImage,
    name: str,
    say: Callable[[str], None],
    *,
    show_build: bool,
    stopped: Callable[[], bool],
) -> bool:
    """Wait until the image is whole; False if the instance was stopped meanwhile.
    ``show_build``: pass the build's lines on (one instance of a job is enough)."""
    if stored.is_built():
        return True
    started = last_said = time.monotonic()
    say(f"Waiting for the image {name} to be built on this machine (first use)")
    offset = 0
    while True:
        if show_build:
            offset = _pass_on(stored.log, offset, say)
        if stored.is_built():
            say(f"The image {name} is ready after {time.monotonic() - started:.0f} s")
            return True
        if stored.failure.is_file():
            raise ImageUnavailable(
                f"the image {name} could not be built: {stored.failure.read_text().strip()}"
            )
        if not _building(stored.lock) and not stored.is_built() and not stored.failure.is_file():
            raise ImageUnavailable(f"the build of the image {name} ended without a result")
        if stopped():
            return False
        now = time.monotonic()
        if not show_build and now - last_said >= HEARTBEAT_SECONDS:
            say(f"Still building the image {name} ({now - started:.0f} s)")
            last_said = now
        time.sleep(POLL_SECONDS)


def hold(stored: StoredImage) -> int:
    """Hold the image's lock shared for as long as this process lives (the descriptor
    returned): the store's prune leaves an image alone while an instance runs on it."""
    fd = os.open(stored.lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a builder just done releases its own in a moment
    return fd


def _building(lock: Path) -> bool:
    """Whether a builder holds the image's lock (a shared lock is refused while it does)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _pass_on(log: Path, offset: int, say: Callable[[str], None]) -> int:
    """Say the log's whole lines after ``offset``; returns where the next read starts."""
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read(1 << 20)
    except FileNotFoundError:
        return offset
    whole = chunk[: chunk.rfind(b"\n") + 1]
    for line in whole.decode(errors="replace").splitlines():
        if line.strip():
            say(f"[image build] {line}")
    return offset + len(whole)
