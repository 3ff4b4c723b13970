"""Paths with their links resolved, once for a batch of submissions.

Preparing one submission resolves the same few paths again and again: the server's
roots, the job's source and output, each asked by several rules (the file roots, the
project's area, the places it writes). Each resolution walks the path on disk, an
``lstat`` per folder; a batch of submissions is judged as if submitted at one moment, so
inside ``resolved_once`` a path is resolved once and the answer kept until it ends.
Outside it, every call walks the disk as ``os.path.realpath`` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_kept: ContextVar[dict[str, str] | None] = ContextVar("resolved_paths", default=None)


def realpath(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``, kept for the rest of the batch inside ``resolved_once``."""
    kept = _kept.get()
    if kept is None:
        return os.path.realpath(path)
    return _resolved(os.fspath(path), kept)


def _resolved(path: str, kept: dict[str, str]) -> str:
    found = kept.get(path)
    if found is not None:
        return found
    parent, name = os.path.split(path)
    if parent and parent != path and name not in ("", ".", ".."):
        # Each job's own paths (its output folder) are new, but their folders are not:
        # the folder is resolved once, and only the last name is looked at (a link is
        # then followed as realpath follows it).
        below = os.path.join(_resolved(parent, kept), name)
        found = os.path.realpath(below) if os.path.islink(below) else below
    else:
        found = os.path.realpath(path)
    kept[path] = found
    return found


@contextmanager
def resolved_once() -> Iterator[None]:
    """Inside it, each path is resolved once (by this thread)."""
    token = _kept.set({})
    try:
        yield
    finally:
        _kept.reset(token)
