"""Hand-made tarballs, including the hostile kinds an archive check must refuse."""

from __future__ import annotations

import gzip
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


def archive_of(target: Path, *members: tuple[str, bytes]) -> Path:
    """A .tar.gz of ``members`` in that order, each a name and a kind (tarfile.DIRTYPE,
    tarfile.REGTYPE); the files empty."""
    with tarfile.open(target, "w:gz") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            tar.addfile(info)
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


def many_members(target: Path, count: int, *, cut: int = 0) -> Path:
    """A .tar.gz of ``count`` empty files, written in about a second for 200,000: one
    header made by tarfile, the others from it with their name's digits and checksum
    changed. ``cut``: that many bytes are left off the end of the packed archive, so a
    reader that gets that far finds it broken."""
    digits = len(str(count))
    template = tarfile.TarInfo("0" * digits).tobuf(tarfile.USTAR_FORMAT)
    # A header's checksum is the sum of its bytes, its own eight counted as spaces.
    base = sum(template[:148]) + 8 * ord(" ") + sum(template[156:]) - digits * ord("0")
    with open(target, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz:
        for index in range(count):
            name = str(index).zfill(digits).encode()
            checksum = b"%06o\0" % (base + sum(name))
            gz.write(name + template[digits:148] + checksum + template[155:])
        gz.write(bytes(2 * tarfile.BLOCKSIZE))
    if cut:
        packed = target.read_bytes()
        target.write_bytes(packed[:-cut])
    return target
