"""Source bundles uploaded by the CLI and SDK (``source_dir`` packed as a .tar.gz).

Stored by content under ``<artifact root>/_sources/<digest>.tar.gz`` (a ``file://``
directory or an ``s3://`` prefix, through ``contract.storage``). The digest is of the files
a bundle unpacks to (``contract.archive``), so the same code uploaded twice is stored once,
however it was packed, and a job's ``source_uri`` never changes under it.

The folder's name is one no job can take (job names have no ``_``): a job's model goes to
``<output_path>/<job name>/output/``, and the default output path is the artifact root.
Bundles stored before under ``sources/`` stay there, since jobs refer to them by URI.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi.concurrency import run_in_threadpool

from contract import storage
from contract.archive import ArchiveError, ArchiveTooLarge, scan_archive
from service.kit.errors import PayloadTooLarge, SpecError
from service.settings import Settings

SOURCES_FOLDER = "_sources"
# Where bundles were stored, by the sha256 of their bytes, before they moved.
LEGACY_FOLDER = "sources"
STORED_NAME = re.compile(r"[0-9a-f]{64}\.tar\.gz")


def folder(settings: Settings) -> str:
    return storage.join(settings.artifact_root, SOURCES_FOLDER)


def legacy_folder(settings: Settings) -> str:
    return storage.join(settings.artifact_root, LEGACY_FOLDER)


async def store(settings: Settings, chunks: AsyncIterator[bytes], *, dry_run: bool = False) -> str:
    """Check the uploaded bundle and store it; returns its ``source_uri``. With
    ``dry_run``, only check it and say where it would be stored."""
    with tempfile.TemporaryDirectory(prefix="runyard-upload-") as scratch:
        upload = Path(scratch) / "source.tar.gz"
        await _receive(chunks, upload, settings.max_source_bytes)
        return await run_in_threadpool(_keep, settings, upload, dry_run)


async def _receive(chunks: AsyncIterator[bytes], upload: Path, max_bytes: int) -> None:
    size = 0
    with open(upload, "wb") as handle:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise PayloadTooLarge(f"source bundle is larger than {max_bytes} bytes")
            handle.write(chunk)
    if size == 0:
        raise SpecError(("body",), "empty upload; send the source as a .tar.gz body")


def _keep(settings: Settings, upload: Path, dry_run: bool) -> str:
    try:
        contents = scan_archive(upload, max_bytes=settings.max_source_unpacked_bytes)
    except ArchiveTooLarge as exc:
        raise PayloadTooLarge(str(exc)) from exc
    except ArchiveError as exc:
        raise SpecError(("body",), str(exc)) from exc
    uri = storage.join(folder(settings), f"{contents.digest}.tar.gz")
    if not dry_run:
        # Written again when it is there already: a copy's time is when it was last
        # uploaded, which retention counts from, so code uploaded for a job about to be
        # submitted is never taken for code nobody uses.
        storage.put_file(upload, uri)
    return uri


def is_pending(settings: Settings, uri: str) -> bool:
    """Whether ``uri`` names a bundle this server would store an upload under but does not
    hold: what a dry run of an upload answers, for a dry run of the job to plan with."""
    prefix = folder(settings) + "/"
    return (
        uri.startswith(prefix)
        and STORED_NAME.fullmatch(uri.removeprefix(prefix)) is not None
        and not storage.exists(uri)
    )
