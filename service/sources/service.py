"""Source bundles uploaded by the CLI and SDK (``source_dir`` packed as a .tar.gz).

Stored content-addressed under ``<artifact root>/sources/`` (a ``file://`` directory or an
``s3://`` prefix, through ``runtime.storage``), so uploading the same code twice stores it
once and a job's ``source_uri`` never changes under it.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi.concurrency import run_in_threadpool

from runtime import storage
from runtime.archive import ArchiveError, check_archive
from service.kit.errors import PayloadTooLarge, SpecError
from service.settings import Settings


async def store(settings: Settings, chunks: AsyncIterator[bytes]) -> str:
    digest = hashlib.sha256()
    size = 0
    with tempfile.TemporaryDirectory(prefix="runyard-upload-") as scratch:
        upload = Path(scratch) / "source.tar.gz"
        with open(upload, "wb") as handle:
            async for chunk in chunks:
                size += len(chunk)
                if size > settings.max_source_bytes:
                    raise PayloadTooLarge(
                        f"source bundle is larger than {settings.max_source_bytes} bytes"
                    )
                digest.update(chunk)
                handle.write(chunk)
        if size == 0:
            raise SpecError(("body",), "empty upload; send the source as a .tar.gz body")
        uri = storage.join(settings.artifact_root, "sources", f"{digest.hexdigest()}.tar.gz")
        await run_in_threadpool(_keep, upload, uri)
    return uri


def _keep(upload: Path, uri: str) -> None:
    try:
        check_archive(upload)
    except ArchiveError as exc:
        raise SpecError(("body",), str(exc)) from exc
    if not storage.exists(uri):
        storage.put_file(upload, uri)
