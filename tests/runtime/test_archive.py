from __future__ import annotations

from pathlib import Path

import pytest

from runtime.archive import ArchiveError, check_archive, extract, make_tarball
from tests.archives import archive_with_link, archive_with_member


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
