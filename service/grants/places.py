"""Places where data lives, compared folder by folder, and what a project may do in each.

A place is a ``file://`` directory or an ``s3://`` prefix. Two URIs are compared by their
keys: for ``file://``, the path as written (``..`` resolved) and the path with its links
resolved, so a link cannot make one place look like another; for ``s3://``, bucket and
key with ``..`` and ``//`` folded as a path would fold them, within the bucket (S3 itself
folds nothing: a key that reads as inside a place only once folded is compared folded).

The project ``default`` (every job's before there were projects) reaches what the
server's file roots and its own credentials reach, as before. Any other project reaches
its own area of the artifact root (read and written), the uploaded sources (read), and
the places granted to it, each read-only or read-write.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from contract import storage
from contract.file_confinement import inside
from service.auth.models import DEFAULT_PROJECT
from service.kit import resolved_paths
from service.sources.service import SOURCES_FOLDER

Access = Literal["read-only", "read-write"]
READ_ONLY: Access = "read-only"
READ_WRITE: Access = "read-write"
# Where each project but default keeps its outputs in the artifact root.
PROJECTS_FOLDER = "projects"
# How long a granted prefix may be (S3's longest key, and room for a bucket's name).
MAX_PREFIX = 1024
# How long a place's key may be to be recorded (an index holds it): a job's output path
# and name, or checkpoint URI, reach half as far.
MAX_PLACE_KEY = 2048

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Folder names of a granted S3 prefix: S3's "safe" characters (no IAM wildcard among
# them), and the few that partitioned datasets name folders with (date=2024-01-01).
_FOLDER = re.compile(r"[A-Za-z0-9!_.'()=+,@~-]+")


def output_root(artifact_root: str, project: str) -> str:
    """Where a job of ``project`` puts its outputs when it names no output_path: its area."""
    if project == DEFAULT_PROJECT:
        return artifact_root
    return storage.join(artifact_root, PROJECTS_FOLDER, project)


def keys(uri: str) -> tuple[str, ...]:
    """``uri``'s place, as the strings it is compared by (see the module's doc); () for
    what names no place (a malformed URI, another scheme)."""
    try:
        if storage.scheme(uri) == "file":
            path = str(storage.local_path(uri))
            if "\x00" in path:
                return ()
            forms = (os.path.normpath(path), resolved_paths.realpath(path))
            return tuple(dict.fromkeys("file://" + form for form in forms))
        storage.check_form(uri)
    except storage.StorageError:
        return ()
    # Folded within its bucket: a ".." never leads into another bucket.
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    folded = posixpath.normpath("/" + key.lstrip("/")).rstrip("/")
    return (f"s3://{bucket}{folded}",)


def covers(top: Iterable[str], key: str) -> bool:
    """Whether the place with keys ``top`` holds the key ``key`` (is it, or above it)."""
    return any(inside(key, each) for each in top)


def overlap(one: Iterable[str], other: Iterable[str]) -> bool:
    """Whether two places share anything: one is the other, or holds it."""
    other = tuple(other)
    return any(inside(a, b) or inside(b, a) for a in one for b in other)


def ancestors(key: str) -> list[str]:
    """The keys of the places that hold ``key``'s, from the top down (not ``key`` itself)."""
    scheme, _, rest = key.partition("://")
    absolute = rest.startswith("/")
    top = f"{scheme}://" + ("/" if absolute else "")
    parts = rest.strip("/").split("/")
    found = [top] if absolute and rest != "/" else []
    found += [top + "/".join(parts[:count]) for count in range(1, len(parts))]
    return found


def canonical_prefix(prefix: str) -> str:
    """``prefix`` if it may be granted: ``file://`` and an absolute, normalized path
    (percent-escaped as ``pathlib`` writes it), or ``s3://bucket`` and an optional
    ``/prefix`` of plain folder names. ValueError saying why otherwise."""
    if prefix.startswith("s3://"):
        _check_s3_prefix(prefix)
        return prefix
    if prefix.startswith("file:"):
        return _check_file_prefix(prefix)
    raise ValueError("only file:///absolute/path and s3://bucket/prefix may be granted")


def _check_s3_prefix(prefix: str) -> None:
    bucket, slash, key = prefix.removeprefix("s3://").partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(f"{bucket!r} is not an S3 bucket name (s3://bucket/prefix)")
    if not slash:
        return
    for folder in key.split("/"):
        if folder in ("", ".", "..") or not _FOLDER.fullmatch(folder):
            raise ValueError(
                "the prefix must be folder names of letters, digits and !_.'()=+,@~- "
                "joined by single '/', with no '.' or '..' and no '/' at the end"
            )


def _check_file_prefix(prefix: str) -> str:
    try:
        path = storage.local_path(prefix)
    except storage.StorageError as exc:
        raise ValueError(str(exc)) from None
    text = str(path)
    if "\x00" in text or text.startswith("//") or text != os.path.normpath(text):
        raise ValueError("must name an absolute, normalized path (file:///data/team)")
    if text == "/":
        raise ValueError("the whole file system cannot be granted: name a directory")
    written = path.as_uri()
    if prefix != written:
        raise ValueError(f"write it as {written}")
    return prefix


@dataclass(frozen=True)
class Place:
    """A place a project may use, and how."""

    uri: str
    access: Access

    @functools.cached_property
    def keys(self) -> tuple[str, ...]:
        # A file:// place's links are resolved as it is used (once a check), not as it
        # was granted.
        return keys(self.uri)

    @property
    def writable(self) -> bool:
        return self.access == READ_WRITE


@dataclass(frozen=True)
class ProjectPlaces:
    """What a project's jobs may use: for ``default``, whatever the server's roots and
    credentials reach (``restricted`` is False); for any other, ``places`` alone."""

    project: str
    # Its area of the artifact root, then the uploaded sources, then its grants.
    places: tuple[Place, ...]

    @property
    def restricted(self) -> bool:
        return self.project != DEFAULT_PROJECT

    @property
    def grants(self) -> tuple[Place, ...]:
        return self.places[2:] if self.restricted else ()

    def allows(self, uri: str, *, writing: bool) -> bool:
        """Whether the project's jobs may read (or write) ``uri``: every key of it inside
        a place that allows as much."""
        if not self.restricted:
            return True
        found = keys(uri)
        usable = [place.keys for place in self.places if place.writable or not writing]
        return bool(found) and all(any(covers(top, key) for top in usable) for key in found)

    def file_roots(self, *, writable: bool) -> tuple[str, ...]:
        """Its ``file://`` places, as the paths an instance's runtime is held to: those it
        may write, or those it may only read."""
        return tuple(
            str(storage.local_path(place.uri))
            for place in self.places
            if place.uri.startswith("file://") and place.writable == writable
        )


def places_of(artifact_root: str, project: str, grants: Sequence[Place]) -> ProjectPlaces:
    if project == DEFAULT_PROJECT:
        return ProjectPlaces(project, ())
    own = Place(output_root(artifact_root, project), READ_WRITE)
    sources = Place(storage.join(artifact_root, SOURCES_FOLDER), READ_ONLY)
    return ProjectPlaces(project, (own, sources, *grants))
