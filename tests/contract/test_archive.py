from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest

from contract.archive import (
    FIXED_MTIME,
    ArchiveError,
    check_archive,
    extract,
    make_tarball,
    scan_archive,
)
from tests.archives import archive_of, archive_with_link, archive_with_member


def test_round_trip_leaves_out_excluded_names(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "train.py").write_text("x")
    (source / "pkg" / "mod.py").write_text("y")
    (source / "pkg" / "__pycache__" / "mod.pyc").write_text("z")
    bundle = make_tarball(source, tmp_path / "b.tar.gz", exclude=frozenset({"__pycache__"}))
    assert sorted(check_archive(bundle)) == ["pkg/mod.py", "train.py"]
    extract(bundle, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "mod.py").read_text() == "y"


@pytest.mark.parametrize(
    "make",
    [
        lambda d: archive_with_member(d / "a.tar.gz", "../outside.txt"),
        lambda d: archive_with_member(d / "a.tar.gz", "ok/../../outside.txt"),
        lambda d: archive_with_member(d / "a.tar.gz", str(d / "outside.txt")),
        lambda d: archive_with_link(d / "a.tar.gz", "link", "../outside.txt"),
        lambda d: archive_with_link(d / "a.tar.gz", "link", "/etc/passwd"),
        lambda d: archive_with_link(d / "a.tar.gz", "link", "../outside.txt", hard=True),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "symlink-out", "symlink-absolute", "hardlink-out"],
)
def test_hostile_archive_writes_nothing(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    bundle = make(tmp_path)
    target = tmp_path / "target" / "deep"
    with pytest.raises(ArchiveError):
        extract(bundle, target)
    assert not (tmp_path / "outside.txt").exists()
    assert list(target.iterdir()) == []


def test_garbage_is_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    with pytest.raises(ArchiveError, match="not a readable tar archive"):
        check_archive(junk)


def test_links_may_only_point_down(tmp_path: Path) -> None:
    import io
    import tarfile

    bundle = tmp_path / "links.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        data = tarfile.TarInfo("pkg/data.txt")
        data.size = 2
        tar.addfile(data, io.BytesIO(b"hi"))
        down = tarfile.TarInfo("current")
        down.type, down.linkname = tarfile.SYMTYPE, "pkg/data.txt"
        tar.addfile(down)
    extract(bundle, tmp_path / "ok")
    assert (tmp_path / "ok" / "current").read_text() == "hi"

    # Up and back in again stays inside the target, but is refused all the same.
    sideways = archive_with_link(tmp_path / "side.tar.gz", "pkg/link", "../pkg/data.txt")
    with pytest.raises(ArchiveError, match="points outside its directory"):
        check_archive(sideways)


def test_an_archive_that_unpacks_too_large_is_refused(tmp_path: Path) -> None:
    big = archive_with_member(tmp_path / "big.tar.gz", "zeros.bin", b"\0" * 100_000)
    assert check_archive(big) == ["zeros.bin"]
    with pytest.raises(ArchiveError, match="unpacks to more than 10000 bytes"):
        extract(big, tmp_path / "out", max_bytes=10_000)


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_packing_the_same_files_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    first = make_tarball(source, tmp_path / "one.tar.gz").read_bytes()
    # Touched since (an editor saving without a change, a fresh checkout), and packed
    # under another file name: neither may change the bundle.
    for path in source.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    second = make_tarball(source, tmp_path / "two.tar.gz").read_bytes()
    assert first == second
    # The gzip header keeps no time (bytes 4-8 are zero, "none") and no file name (FLG 0).
    assert first[3] == 0
    assert first[4:8] == b"\0\0\0\0"
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        members = tar.getmembers()
    assert [member.name for member in members] == ["pkg", "pkg/mod.py", "run.sh", "train.py"]
    assert {member.mtime for member in members} == {FIXED_MTIME}
    assert {member.name: member.mode for member in members} == {
        "pkg": 0o755,
        "pkg/mod.py": 0o644,
        "run.sh": 0o755,
        "train.py": 0o644,
    }


def test_the_digest_is_of_what_unpacks_not_of_how_it_was_packed(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    packed = scan_archive(make_tarball(source, tmp_path / "ours.tar.gz"))
    assert packed.files == ["pkg/mod.py", "run.sh", "train.py"]
    # The same files in another order, with other times, uncompressed: the same content.
    other = tmp_path / "other.tar"
    with tarfile.open(other, "w") as tar:
        for name in ["train.py", "run.sh", "pkg", "pkg/mod.py"]:
            tar.add(source / name, arcname=name, recursive=False)
    assert scan_archive(other).digest == packed.digest

    (source / "train.py").write_text("print('changed')\n")
    changed = scan_archive(make_tarball(source, tmp_path / "changed.tar.gz"))
    assert changed.digest != packed.digest
    (source / "train.py").write_text("print('train')\n")
    (source / "train.py").chmod(0o755)
    executable = scan_archive(make_tarball(source, tmp_path / "exec.tar.gz"))
    assert executable.digest not in (packed.digest, changed.digest)


def _with_hardlink(target: Path, link_first: bool, points_to: str = "data.txt") -> Path:
    data = tarfile.TarInfo("data.txt")
    data.size = 2
    link = tarfile.TarInfo("copy.txt")
    link.type, link.linkname = tarfile.LNKTYPE, points_to
    with tarfile.open(target, "w:gz") as tar:
        if link_first:
            tar.addfile(link)
        tar.addfile(data, io.BytesIO(b"hi"))
        if not link_first:
            tar.addfile(link)
    return target


def test_a_hard_link_must_point_to_a_file_before_it(tmp_path: Path) -> None:
    good = _with_hardlink(tmp_path / "good.tar.gz", link_first=False)
    assert sorted(check_archive(good)) == ["copy.txt", "data.txt"]
    extract(good, tmp_path / "out")
    assert (tmp_path / "out" / "copy.txt").read_text() == "hi"

    # tarfile would extract these only to fail half-way with a KeyError.
    for bundle in [
        archive_with_link(tmp_path / "missing.tar.gz", "link", "not-there.py", hard=True),
        _with_hardlink(tmp_path / "later.tar.gz", link_first=True),
    ]:
        with pytest.raises(ArchiveError, match=r"hard link to '.*', which is not a file before it"):
            check_archive(bundle)
        target = tmp_path / f"out-{bundle.name}"
        with pytest.raises(ArchiveError):
            extract(bundle, target)
        assert list(target.iterdir()) == []


def test_hard_links_in_the_packed_directory_become_files(tmp_path: Path) -> None:
    # The first name of a hard-linked file is left out; tar would make the second a link
    # to a member that is not there.
    source = tmp_path / "src"
    (source / ".git").mkdir(parents=True)
    (source / ".git" / "original").write_text("shared\n")
    os.link(source / ".git" / "original", source / "train.py")
    bundle = make_tarball(source, tmp_path / "b.tar.gz", exclude=frozenset({".git"}))
    assert check_archive(bundle) == ["train.py"]
    extract(bundle, tmp_path / "out")
    assert (tmp_path / "out" / "train.py").read_text() == "shared\n"


DIR, FILE = tarfile.DIRTYPE, tarfile.REGTYPE


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([("pkg", DIR), ("pkg", FILE)], "'pkg': a file where a directory of that name came"),
        ([("pkg", FILE), ("pkg", DIR)], "'pkg': a directory where a file of that name came"),
        ([("pkg/a.py", FILE), ("pkg", FILE)], "'pkg': a file where a directory of that name"),
        ([("pkg", FILE), ("pkg/a.py", FILE)], "'pkg/a.py': it is under 'pkg', a file before it"),
    ],
    ids=["dir-then-file", "file-then-dir", "implied-dir-then-file", "file-then-under-it"],
)
def test_a_name_that_is_a_directory_and_not_is_refused_naming_the_member(
    tmp_path: Path, members: list[tuple[str, bytes]], why: str
) -> None:
    """Unpacked as they stand, these fail half-way (EISDIR, ENOTDIR), or leave a file where
    the archive says a directory."""
    bundle = archive_of(tmp_path / "clash.tar.gz", *members)
    with pytest.raises(ArchiveError, match=f"clash.tar.gz: refused member {re.escape(why)}"):
        check_archive(bundle)
    with pytest.raises(ArchiveError):
        extract(bundle, tmp_path / "out")
    assert not (tmp_path / "out" / "pkg").exists()


def test_a_name_given_again_as_the_same_kind_unpacks(tmp_path: Path) -> None:
    members = [("pkg", DIR), ("pkg/a.py", FILE), ("pkg", DIR), ("pkg/a.py", FILE)]
    bundle = archive_of(tmp_path / "again.tar.gz", *members)
    assert check_archive(bundle) == ["pkg/a.py", "pkg/a.py"]
    extract(bundle, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "a.py").is_file()
