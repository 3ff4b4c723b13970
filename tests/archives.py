"""Hand-made tarballs, including the hostile kinds an archive check must refuse."""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
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


def gzip_bomb(target: Path, zeros: int, *, declared: int | None = None) -> Path:
    """A .tar.gz of one member, ``zeros.bin``, holding ``zeros`` zero bytes (its header may
    claim ``declared`` instead): a decompression bomb of about 1 KiB a MiB, written in under
    a second for 2 GiB. After a full flush deflate starts afresh, so every MiB of zeros packs
    to the same bytes: one MiB is compressed and its bytes repeated."""
    info = tarfile.TarInfo("zeros.bin")
    info.size = zeros if declared is None else declared
    header = info.tobuf(tarfile.GNU_FORMAT)  # GNU: sizes past 8 GiB fit
    # After the header everything is zeros: the member's bytes, its padding to a block,
    # and the two empty blocks that end the archive.
    after = -(-zeros // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE + 2 * tarfile.BLOCKSIZE
    mib = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = deflate.compress(header) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(after, len(mib))
    crc = zlib.crc32(header)
    for _ in range(whole):
        crc = zlib.crc32(mib, crc)
    crc = zlib.crc32(bytes(rest), crc)
    with open(target, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip, deflate, no name or time
        out.write(head)
        for _ in range(whole):
            out.write(block)
        out.write(deflate.compress(bytes(rest)) + deflate.flush())
        out.write(struct.pack("<II", crc, (len(header) + after) & 0xFFFFFFFF))
    return target
