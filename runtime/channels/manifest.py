"""ManifestFile channels: one object (s3:// or file://) that names the channel's objects.

The format is SageMaker's: a JSON array whose first element is ``{"prefix": "<uri>"}``
and whose other elements are keys relative to it, ``[{"prefix": "s3://b/data/"},
"train/a.csv", "train/b.csv"]``. Each object is the prefix and its key joined as strings
(as SageMaker joins them, so the prefix usually ends in ``/``; after a ``file://`` prefix
the key is percent-encoded, being a file name) and lands at its key. A manifest is checked
whole before anything is fetched: a key that would land outside the channel, an empty key
or one named twice refuses it, naming the manifest and the entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contract import storage
from runtime.channels.channel_data import check_key

# Far above any real manifest (a million keys of 60 characters), far below a memory problem.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


class ManifestError(storage.StorageError):
    """A manifest cannot be used; the message names it and the entry at fault."""


@dataclass(frozen=True)
class Entry:
    uri: str
    key: str


def read(uri: str) -> list[Entry]:
    """The manifest's entries, in its own order."""
    return parse(uri, storage.read_bytes(uri, MAX_MANIFEST_BYTES))


def parse(uri: str, raw: bytes) -> list[Entry]:
    try:
        data: Any = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"manifest {uri}: not JSON ({exc})") from exc
    if not isinstance(data, list) or not data:
        raise ManifestError(f"manifest {uri}: must be a JSON array, starting with its prefix")
    head = data[0]
    prefix = head.get("prefix") if isinstance(head, dict) else None
    if not isinstance(prefix, str) or not prefix:
        raise ManifestError(
            f'manifest {uri}: its first element must be {{"prefix": "<uri>"}}, not {head!r}'
        )
    try:
        storage.scheme(prefix)
    except storage.StorageError as exc:
        raise ManifestError(f"manifest {uri}: prefix {prefix!r}: {exc}") from exc
    entries: list[Entry] = []
    seen: set[str] = set()
    for position, key in enumerate(data[1:], start=1):
        where = f"manifest {uri}: entry {position}"
        if not isinstance(key, str):
            raise ManifestError(f"{where} must be a relative key (a string), not {key!r}")
        try:
            check_key(prefix, key)
        except storage.StorageError:
            raise ManifestError(
                f"{where} {key!r}: not a relative path inside the channel "
                "(empty, absolute, or with '.', '..' or '//' in it)"
            ) from None
        if key in seen:
            raise ManifestError(f"{where} {key!r}: named twice")
        seen.add(key)
        entries.append(Entry(_object_uri(where, prefix, key), key))
    return entries


def _object_uri(where: str, prefix: str, key: str) -> str:
    try:
        return storage.concat(prefix, key)
    except storage.StorageError as exc:
        raise ManifestError(f"{where} {key!r}: {exc}") from exc
