"""A channel's objects as the script sees them: where each lands and what its bytes are.

Every input mode delivers the same bytes: File lands them in ``input/data/<channel>/``,
FastFile in its cache when first read, Pipe streams them into a FIFO. With
``CompressionType: Gzip`` those bytes are the objects' content gunzipped on the way, and a
name's trailing ``.gz`` is dropped, as the data the script reads is no longer compressed.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contract import storage

# zlib's wbits for the gzip format: a gzip header and trailer around a deflate stream.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# The most decompressed bytes held at once, whatever the compression ratio.
_OUTPUT_CHUNK = storage.CHUNK_SIZE


class ChannelError(Exception):
    """A channel asks for something this runtime cannot do."""


@dataclass(frozen=True)
class ChannelObject:
    uri: str
    # Its path in the channel: below the channel's prefix, or the manifest's relative key;
    # without ``.gz`` where the channel is gunzipped.
    key: str
    # As stored (compressed, where it is).
    size: int
    gzip: bool = False


def landing_key(key: str, gzip: bool) -> str:
    """Where an object stored under ``key`` lands: ``.gz`` dropped from a gunzipped one's
    name (a name that is only ``.gz`` keeps it, or nothing would be left)."""
    directory, _, name = key.rpartition("/")
    if gzip and name.endswith(".gz") and name != ".gz":
        name = name.removesuffix(".gz")
    return f"{directory}/{name}" if directory else name


def check_key(uri: str, key: str) -> None:
    """Refuses a key that would land outside the channel's directory (or nowhere)."""
    parts = key.split("/")
    if key.startswith("/") or "\0" in key or any(part in ("", ".", "..") for part in parts):
        raise storage.StorageError(f"{uri}: refused object {key!r}: its path leaves the target")


def chunks(item: ChannelObject, on_bytes: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The object's content (gunzipped if it is compressed), a chunk at a time; nothing
    lands on disk. ``on_bytes`` hears how many stored bytes each chunk read."""
    raw = storage.read_chunks(item.uri)
    if item.gzip:
        return _gunzip(item.uri, raw, on_bytes)
    if on_bytes is None:
        return raw
    return _counted(raw, on_bytes)


def land(item: ChannelObject, target: Path, on_bytes: Callable[[int], None] | None = None) -> None:
    """Write the object's content to ``target``, which appears whole or not at all: a
    failed or interrupted copy never leaves a file a reader could take for the object.
    A StorageError names the object, and the target where this side failed (a full
    disk, or something else already at that path)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        os.close(fd)
    except OSError as exc:
        raise _landing_error(item, target, exc) from exc
    try:
        if item.gzip:
            with open(temporary, "wb") as output:
                for chunk in chunks(item, on_bytes):
                    output.write(chunk)
        else:
            storage.copy_object(item.uri, Path(temporary), on_bytes)
        os.replace(temporary, target)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _landing_error(item, target, exc) from exc
        raise


def _landing_error(item: ChannelObject, target: Path, exc: OSError) -> storage.StorageError:
    return storage.StorageError(f"{item.uri} -> {target}: cannot land it ({exc.strerror or exc})")


def _counted(raw: Iterable[bytes], on_bytes: Callable[[int], None]) -> Iterator[bytes]:
    for chunk in raw:
        on_bytes(len(chunk))
        yield chunk


def _gunzip(
    uri: str, raw: Iterable[bytes], on_bytes: Callable[[int], None] | None
) -> Iterator[bytes]:
    """Gunzip a stream of chunks. Several gzip members one after another (what ``cat
    a.gz b.gz`` makes, and what parallel compressors write) are one content, and zero
    padding between or after members is skipped, as gzip itself reads them. A corrupt or
    cut-off object raises a StorageError naming it."""
    decompressor = zlib.decompressobj(_GZIP_WBITS)
    in_member = ended_one = False
    for chunk in raw:
        if on_bytes is not None:
            on_bytes(len(chunk))
        data = chunk
        while data:
            if ended_one and not in_member:
                data = data.lstrip(b"\0")
                if not data:
                    break
            in_member = True
            try:
                # Bounded output: a small object can expand enormously.
                out = decompressor.decompress(data, _OUTPUT_CHUNK)
                while out:
                    yield out
                    tail = decompressor.unconsumed_tail
                    out = b"" if decompressor.eof else decompressor.decompress(tail, _OUTPUT_CHUNK)
            except zlib.error as exc:
                raise storage.StorageError(f"{uri}: not a valid gzip object ({exc})") from exc
            if not decompressor.eof:
                break  # all of this chunk is consumed; the member goes on in the next one
            data = decompressor.unused_data
            decompressor = zlib.decompressobj(_GZIP_WBITS)
            in_member, ended_one = False, True
    if in_member:
        raise storage.StorageError(f"{uri}: not a valid gzip object (it ends mid-stream)")
