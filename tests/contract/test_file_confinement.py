"""file:// objects used only where they really are, once a process is confined to the
server's file roots: links made or swapped in after a job was submitted lead nowhere
else, whether they are met reading, listing, fetching or writing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract import file_confinement, storage


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A root with a dataset in it, and a secret beside the root."""
    root = tmp_path / "root"
    data = root / "data"
    data.mkdir(parents=True)
    (data / "part-0").write_text("inside")
    secret = tmp_path / "home" / "token"
    secret.parent.mkdir()
    secret.write_text("the admin token")
    # Confined for this test only: the module's state comes back as it was.
    monkeypatch.setattr(file_confinement, "_roots", None)
    file_confinement.confine([str(root)])
    return {"root": root, "data": data, "secret": secret}


def test_what_is_inside_is_read_as_before(roots: dict[str, Path], tmp_path: Path) -> None:
    data = roots["data"]
    assert b"".join(storage.read_chunks((data / "part-0").as_uri())) == b"inside"
    fetched = storage.fetch(data.as_uri(), tmp_path / "fetched")
    assert (fetched / "part-0").read_text() == "inside"
    assert [item.relative for item in storage.listing(data.as_uri())] == ["part-0"]
    # A link inside the root to a file inside it is that file, as before.
    (data / "alias").symlink_to(data / "part-0")
    assert b"".join(storage.read_chunks((data / "alias").as_uri())) == b"inside"


def test_a_link_to_a_file_outside_is_refused_when_read(roots: dict[str, Path]) -> None:
    data = roots["data"]
    (data / "leak").symlink_to(roots["secret"])
    with pytest.raises(storage.StorageError, match="refused"):
        b"".join(storage.read_chunks((data / "leak").as_uri()))
    with pytest.raises(storage.StorageError, match="refused"):
        storage.size((data / "leak").as_uri())


def test_a_sharded_fetch_refuses_a_link_outside(roots: dict[str, Path], tmp_path: Path) -> None:
    data = roots["data"]
    (data / "part-1").symlink_to(roots["secret"])
    with pytest.raises(storage.StorageError, match="refused"):
        storage.fetch(data.as_uri(), tmp_path / "shard", shard=(1, 2))
    assert not (tmp_path / "shard" / "part-1").exists()


def test_a_whole_fetch_copies_a_link_as_a_link_never_its_target(
    roots: dict[str, Path], tmp_path: Path
) -> None:
    data = roots["data"]
    (data / "leak").symlink_to(roots["secret"])
    fetched = storage.fetch(data.as_uri(), tmp_path / "fetched")
    assert (fetched / "leak").is_symlink()
    assert os.readlink(fetched / "leak") == str(roots["secret"])
    assert (fetched / "part-0").read_text() == "inside"


def test_a_channel_swapped_for_a_link_after_submission_is_refused(
    roots: dict[str, Path], tmp_path: Path
) -> None:
    data = roots["data"]
    moved = tmp_path / "moved"
    data.rename(moved)
    data.symlink_to(roots["secret"].parent)  # the server's home, say
    with pytest.raises(storage.StorageError, match="refused"):
        storage.fetch(data.as_uri(), tmp_path / "fetched")
    with pytest.raises(storage.StorageError, match="refused"):
        storage.listing(data.as_uri())
    assert not (tmp_path / "fetched" / "token").exists()


def test_a_model_is_never_written_through_a_link(roots: dict[str, Path], tmp_path: Path) -> None:
    model = tmp_path / "model.tar.gz"
    model.write_bytes(b"weights")
    output = roots["root"] / "output"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    output.symlink_to(elsewhere)
    with pytest.raises(storage.StorageError, match="refused"):
        storage.put_file(model, (output / "job" / "model.tar.gz").as_uri())
    assert list(elsewhere.iterdir()) == []
    # Where no link is in the way, directories are made and the file lands.
    storage.put_file(model, (roots["root"] / "out" / "job" / "model.tar.gz").as_uri())
    assert (roots["root"] / "out" / "job" / "model.tar.gz").read_bytes() == b"weights"


def test_a_path_outside_every_root_is_refused(roots: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(storage.StorageError, match="refused"):
        b"".join(storage.read_chunks(roots["secret"].as_uri()))
    model = tmp_path / "m"
    model.write_bytes(b"m")
    with pytest.raises(storage.StorageError, match="refused"):
        storage.put_file(model, (tmp_path / "out" / "m").as_uri())


def test_unconfined_a_link_is_followed_as_before(tmp_path: Path) -> None:
    assert not file_confinement.confined()
    (tmp_path / "secret").write_text("s")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    assert b"".join(storage.read_chunks((tmp_path / "link").as_uri())) == b"s"


def test_a_read_only_root_is_read_and_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project's read-only grant: its jobs read it, and nothing of theirs is stored,
    replaced or removed there, not even through a link in a place they may write."""
    granted = tmp_path / "granted"
    granted.mkdir()
    (granted / "part-0").write_text("shared data")
    own = tmp_path / "own"
    own.mkdir()
    (own / "into-granted").symlink_to(granted)
    upload = tmp_path / "model.tar.gz"
    upload.write_text("weights")
    monkeypatch.setattr(file_confinement, "_roots", None)
    monkeypatch.setattr(file_confinement, "_writable", ())
    file_confinement.confine([str(own)], read_only=[str(granted)])

    assert b"".join(storage.read_chunks((granted / "part-0").as_uri())) == b"shared data"
    for target in (granted / "part-0", granted / "new", own / "into-granted" / "new"):
        with pytest.raises(storage.StorageError, match="refused"):
            storage.put_file(upload, target.as_uri())
    with pytest.raises(storage.StorageError, match="refused"):
        storage.remove((granted / "part-0").as_uri())
    assert sorted(path.name for path in granted.iterdir()) == ["part-0"]
    assert (granted / "part-0").read_text() == "shared data"
    storage.put_file(upload, (own / "job-1" / "model.tar.gz").as_uri())
    assert (own / "job-1" / "model.tar.gz").read_text() == "weights"


def test_confined_to_no_root_every_local_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project granted no local place: its instances use no file:// URI at all."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0").write_text("anyone's")
    monkeypatch.setattr(file_confinement, "_roots", None)
    monkeypatch.setattr(file_confinement, "_writable", ())
    file_confinement.confine([], read_only=[])
    with pytest.raises(storage.StorageError, match="refused"):
        storage.fetch(data.as_uri(), tmp_path / "fetched")
    with pytest.raises(storage.StorageError, match="refused"):
        storage.put_file(data / "part-0", (tmp_path / "out" / "x").as_uri())
