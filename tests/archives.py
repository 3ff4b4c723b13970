"""Hand-made tarballs, including the hostile kinds an archive check must refuse."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def archive_with_member(target: Path, name: str, content: bytes = b"print('x')\n") -> Path:
    with tarfile.open(target, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return target


def archive_with_link(target: Path, name: str, points_to: str, *, hard: bool = False) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
        info.linkname = points_to
        tar.addfile(info)
    return target
