"""Where code, data and artifacts live, addressed by URI.

Only ``file://`` exists in this build; every caller goes through these functions so a
second scheme (``s3://``) is one more branch here, not a change at each call site.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

SUPPORTED_SCHEMES = ("file",)


class StorageError(Exception):
    """A URI is malformed, unsupported or unreadable; the message names it."""


def local_path(uri: str) -> Path:
    """The absolute path a ``file://`` URI names."""
    parts = urlsplit(uri)
    if parts.scheme not in SUPPORTED_SCHEMES:
        supported = ", ".join(f"{scheme}://" for scheme in SUPPORTED_SCHEMES)
        raise StorageError(f"{uri!r}: unsupported scheme (this server supports {supported})")
    if parts.netloc not in ("", "localhost"):
        raise StorageError(f"{uri!r}: file URIs must not name a host")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise StorageError(f"{uri!r}: file URIs must hold an absolute path (file:///...)")
    return Path(path)


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(part.strip("/") for part in parts)])


def exists(uri: str) -> bool:
    return local_path(uri).exists()


def is_dir(uri: str) -> bool:
    return local_path(uri).is_dir()


def put_file(source: Path, uri: str) -> None:
    """Copy ``source`` to ``uri`` so that readers never see a half-written object."""
    target = local_path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp_name)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def fetch(uri: str, destination: Path) -> Path:
    """Copy what ``uri`` names into the directory ``destination``.

    A directory's contents land directly in ``destination``; a single file lands inside it
    under its own name. Returns the path of what was fetched.
    """
    source = local_path(uri)
    if not source.exists():
        raise StorageError(f"{uri}: no such file or directory")
    destination.mkdir(parents=True, exist_ok=True)
    try:
        if source.is_dir():
            shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
            return destination
        target = destination / source.name
        shutil.copyfile(source, target)
        return target
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc
