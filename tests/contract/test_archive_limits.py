"""Checking an archive is bounded work: refused on a member's header before its bytes are
read, and as the stream is decompressed once it is a bomb; and names that no file system
takes are refused whole instead of failing half-way through unpacking."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
import time
from pathlib import Path

import pytest

from contract.archive import (
    MAX_DEPTH,
    MAX_MEMBERS,
    RATIO_FLOOR_BYTES,
    ArchiveError,
    ArchiveTooLarge,
    check_archive,
    extract,
    make_tarball,
    scan_archive,
)
from tests.archives import archive_with_link, archive_with_member, gzip_bomb, many_members

GIB = 1024**3
MIB = 1024**2
EXAMPLES = Path(__file__).parents[2] / "examples"


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, made as they are read: a bomb's member, never held whole."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        count = self.left if size < 0 else min(size, self.left)
        self.left -= count
        return bytes(count)


def _packed_zeros(target: Path, mode: str, size: int) -> Path:
    with tarfile.open(target, mode) as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size = size
        tar.addfile(info, _Zeros(size))
    return target


def _read_before_refusal(error: pytest.ExceptionInfo[ArchiveError]) -> int:
    found = re.search(r"\((\d+) bytes from the first \d+\)", str(error.value))
    assert found, str(error.value)
    return int(found.group(1))


def test_a_member_over_the_limit_is_refused_on_its_header(tmp_path: Path) -> None:
    # The header says 2 GiB and the archive ends after 4 KiB: reading any of the member
    # would find it unreadable, so only a refusal on the header says "unpacks to more".
    cut = gzip_bomb(tmp_path / "cut.tar.gz", 4096, declared=2 * GIB)
    with pytest.raises(ArchiveTooLarge, match=r"unpacks to more than 1073741824 bytes"):
        scan_archive(cut, max_bytes=GIB)
    with pytest.raises(ArchiveError, match="not a readable tar archive"):
        scan_archive(cut, max_bytes=4 * GIB)

    whole = gzip_bomb(tmp_path / "whole.tar.gz", 2 * GIB)
    started = time.monotonic()
    with pytest.raises(ArchiveTooLarge, match=r"at member 'zeros.bin', of 2147483648 bytes"):
        check_archive(whole, max_bytes=GIB)
    assert time.monotonic() - started < 5


def test_members_count_towards_the_limit_together(tmp_path: Path) -> None:
    bundle = tmp_path / "two.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for name in ["a.bin", "b.bin"]:
            info = tarfile.TarInfo(name)
            info.size = 600
            tar.addfile(info, io.BytesIO(bytes(600)))
    assert check_archive(bundle, max_bytes=1200) == ["a.bin", "b.bin"]
    with pytest.raises(ArchiveTooLarge, match=r"more than 1000 bytes .*member 'b.bin'"):
        check_archive(bundle, max_bytes=1000)


def test_a_gzip_bomb_is_refused_after_a_few_mib(tmp_path: Path) -> None:
    # 2 GiB of zeros in 2 MiB, under the 4 GiB an archive may unpack to.
    bomb = gzip_bomb(tmp_path / "bomb.tar.gz", 2 * GIB)
    assert bomb.stat().st_size < 3 * MIB
    started = time.monotonic()
    with pytest.raises(ArchiveTooLarge, match="200 times its packed size") as refused:
        scan_archive(bomb)
    assert time.monotonic() - started < 5
    assert _read_before_refusal(refused) < RATIO_FLOOR_BYTES + 4 * MIB
    target = tmp_path / "out"
    with pytest.raises(ArchiveTooLarge):
        extract(bomb, target)
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
def test_a_bomb_is_refused_however_it_is_compressed(tmp_path: Path, mode: str) -> None:
    bomb = _packed_zeros(tmp_path / "bomb.tar", mode, 64 * MIB)
    with pytest.raises(ArchiveTooLarge, match="decompression bomb") as refused:
        check_archive(bomb)
    assert _read_before_refusal(refused) < RATIO_FLOOR_BYTES + 4 * MIB


def test_a_bomb_in_a_header_is_refused_before_tarfile_keeps_it(tmp_path: Path) -> None:
    # tarfile reads a GNU long name whole into memory before it yields the member.
    def long_name(size: int) -> bytes:
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = tarfile.GNUTYPE_LONGNAME, size
        name = b"a" * size + bytes(-size % tarfile.BLOCKSIZE)
        return info.tobuf(tarfile.GNU_FORMAT) + name + tarfile.TarInfo("x").tobuf()

    packed = tmp_path / "name.tar.gz"
    packed.write_bytes(gzip.compress(long_name(64 * MIB)))
    with pytest.raises(ArchiveTooLarge, match="decompression bomb") as refused:
        check_archive(packed)
    assert _read_before_refusal(refused) < RATIO_FLOOR_BYTES + 4 * MIB
    # Uncompressed, the headers count against the unpacked bytes allowed.
    plain = tmp_path / "name.tar"
    plain.write_bytes(long_name(2 * MIB))
    with pytest.raises(ArchiveTooLarge, match=r"unpacks to more than 100000 bytes$"):
        check_archive(plain, max_bytes=100_000)


def test_small_or_incompressible_archives_pass(tmp_path: Path) -> None:
    # 500:1, but under the floor: too small to be worth refusing.
    small = _packed_zeros(tmp_path / "small.tar.gz", "w:gz", RATIO_FLOOR_BYTES // 2)
    assert check_archive(small) == ["zeros.bin"]
    noise = archive_with_member(tmp_path / "noise.tar.gz", "noise.bin", _noise(8 * MIB))
    assert check_archive(noise) == ["noise.bin"]


def _noise(size: int) -> bytes:
    # Not random.randbytes: the same bytes every run, and still incompressible.
    return b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(size // 32))


def test_the_member_count_is_checked_on_the_header(tmp_path: Path) -> None:
    def members(count: int, *, last_cut: bool) -> Path:
        stream = b""
        for index in range(count):
            info = tarfile.TarInfo(f"f{index}.py")
            info.size = 512
            stream += info.tobuf()
            if not (last_cut and index == count - 1):
                stream += bytes(512)
        target = tmp_path / f"{count}-{last_cut}.tar.gz"
        target.write_bytes(gzip.compress(stream + bytes(1024)))
        return target

    assert len(check_archive(members(10, last_cut=False), max_members=10)) == 10
    # The eleventh member's bytes are missing: only a refusal on its header names the count.
    with pytest.raises(ArchiveTooLarge, match="has more than 10 members"):
        check_archive(members(11, last_cut=True), max_members=10)


@pytest.fixture
def members_read(monkeypatch: pytest.MonkeyPatch) -> list[tarfile.TarInfo | None]:
    """Every member tarfile reads from here on (the checks read each through it)."""
    read: list[tarfile.TarInfo | None] = []
    next_member = tarfile.TarFile.next

    def counted(tar: tarfile.TarFile) -> tarfile.TarInfo | None:
        read.append(member := next_member(tar))
        return member

    monkeypatch.setattr(tarfile.TarFile, "next", counted)
    return read


def test_too_many_members_are_refused_on_their_headers_before_any_is_checked(
    tmp_path: Path, members_read: list[tarfile.TarInfo | None]
) -> None:
    """MAX_MEMBERS + 1 empty files, then more, then the archive cut short: refused for its
    count, having read nothing much past the member one too many (reading on meets the
    cut, and says so), and before tarfile reads a single member for the checks (checking
    200,000 members costs about 15 s of CPU)."""
    more = 60_000  # about 500 KiB packed: far more than any reader reads ahead
    bundle = many_members(tmp_path / "many.tar.gz", MAX_MEMBERS + 1 + more, cut=100_000)
    with pytest.raises(ArchiveTooLarge, match=f"has more than {MAX_MEMBERS} members"):
        scan_archive(bundle)
    assert members_read == []
    # Allowed all its members, the same archive is read to the cut.
    with pytest.raises(ArchiveError, match="not a readable tar archive"):
        scan_archive(bundle, max_members=MAX_MEMBERS + 1 + more)


@pytest.mark.parametrize("form", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_a_long_names_header_is_no_member_of_its_own(
    tmp_path: Path, form: int, members_read: list[tarfile.TarInfo | None]
) -> None:
    bundle = tmp_path / "long.tar.gz"
    with tarfile.open(bundle, "w:gz", format=form) as tar:
        for index in range(10):
            tar.addfile(tarfile.TarInfo(f"{'d' * 120}/{index}.py"))
            link = tarfile.TarInfo(f"{'l' * 120}/{index}")
            link.type, link.linkname = tarfile.SYMTYPE, "t" * 120
            tar.addfile(link)
    assert len(check_archive(bundle, max_members=20)) == 10
    members_read.clear()
    with pytest.raises(ArchiveTooLarge, match="has more than 19 members"):
        check_archive(bundle, max_members=19)
    assert members_read == []  # refused by the count on the headers


@pytest.mark.parametrize("size_in", ["header", "pax header"])
def test_the_count_steps_over_what_a_file_holds(tmp_path: Path, size_in: str) -> None:
    """A file that holds a tar of 20 members is one member, whether its size is in its
    header or in a pax header alone (as for a file over 8 GiB)."""
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        for index in range(20):
            tar.addfile(tarfile.TarInfo(f"inner-{index}.py"))
    held = inner.getvalue()
    info = tarfile.TarInfo("inner.tar")
    if size_in == "pax header":
        info.pax_headers = {"size": str(len(held))}
    else:
        info.size = len(held)
    stream = info.tobuf(tarfile.PAX_FORMAT) + held + bytes(2 * tarfile.BLOCKSIZE)
    bundle = tmp_path / "holds-a-tar.tar.gz"
    bundle.write_bytes(gzip.compress(stream))
    assert check_archive(bundle, max_members=1) == ["inner.tar"]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty name"),
        ("./", "empty name"),
        ("/".join(["d"] * (MAX_DEPTH + 1)), "path deeper than 64 directories"),
        ("/".join(["d"] * 2000), "path deeper than 64 directories"),
        ("/".join(["n" * 200] * 25), "name longer than 4096 bytes"),
        ("pkg/" + "n" * 256 + ".py", "name longer than 255 bytes"),
    ],
    ids=["empty", "dot-file", "65-deep", "2000-deep", "5000-bytes", "long-component"],
)
def test_names_that_cannot_unpack_are_refused_by_name(tmp_path: Path, name: str, why: str) -> None:
    bundle = archive_with_member(tmp_path / "bad.tar.gz", name)
    with pytest.raises(ArchiveError) as refused:
        check_archive(bundle)
    assert f"refused member {name[:200]!r}" in str(refused.value)
    assert why in str(refused.value)
    assert len(str(refused.value)) < 600  # a long name is cut short in the message
    # What the runtime unpacks a job's code with: refused, never a crash half-way.
    target = tmp_path / "code"
    with pytest.raises(ArchiveError):
        extract(bundle, target)
    assert list(target.iterdir()) == []


def test_a_link_to_a_name_too_long_is_refused(tmp_path: Path) -> None:
    bundle = archive_with_link(tmp_path / "link.tar.gz", "link", "/".join(["d" * 200] * 25))
    with pytest.raises(ArchiveError, match="link target longer than 4096 bytes"):
        check_archive(bundle)


def test_names_at_the_limits_unpack(tmp_path: Path) -> None:
    deep = "/".join(["d"] * (MAX_DEPTH - 1) + ["train.py"])
    wide = "n" * 252 + ".py"
    bundle = tmp_path / "edges.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        top = tarfile.TarInfo("./")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        for name in [deep, wide]:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
    assert check_archive(bundle) == [deep, wide]
    extract(bundle, tmp_path / "out")
    assert (tmp_path / "out" / deep).read_text() == "x\n"
    assert (tmp_path / "out" / wide).exists()


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_the_examples_pass_with_one_digest_however_packed(tmp_path: Path, example: str) -> None:
    source = EXAMPLES / example
    ours = scan_archive(make_tarball(source, tmp_path / "ours.tar.gz"))
    on_disk = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    assert sorted(ours.files) == on_disk
    for mode in ["w", "w:bz2", "w:xz"]:
        other = tmp_path / f"other.{mode}"
        with tarfile.open(other, mode) as tar:
            for entry in sorted(source.iterdir()):
                tar.add(entry, arcname=entry.name, filter=_as_packed)
        assert scan_archive(other).digest == ours.digest, mode


def _as_packed(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # make_tarball keeps only whether a file is executable; modes are part of the digest.
    info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
    return info
